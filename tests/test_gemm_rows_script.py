"""scripts/gemm_rows.py: the q-row matrix-product timing behind docs/streaming.md's v4 explanation."""
import json

from _scripts import load_script


def test_gemm_rows_reports_every_shape_and_row_count(tmp_path, capsys):
    gemm = load_script("gemm_rows")
    out = tmp_path / "gemm.json"
    assert gemm.main(["--repeats", "2", "--inner", "1", "--dtype", "float32", "--dtype", "bfloat16",
                      "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res == json.loads(capsys.readouterr().out)
    assert set(res["by_dtype"]) == {"float32", "bfloat16"}
    for by_shape in res["by_dtype"].values():
        assert set(by_shape) == set(gemm.SHAPES)
        for row in by_shape.values():
            assert set(row["us"]) == {str(q) for q in gemm.ROWS}
            assert all(t > 0 for t in row["us"].values())
            assert row["over_one_row"]["1"] == 1.0


def test_gemm_rows_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    gemm = load_script("gemm_rows")
    out = tmp_path / "gemm.json"
    assert gemm.main(["--repeats", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --repeats, --inner and --threads must be >= 1, got 0, 20, 1"]
    assert not out.exists()
