"""The hidden-state geometry behind the offsets (seed 000 §2.2 (iii)): streamed sums equal the direct
computation, and the three measures tell apart worlds where one shift, only a per-position map, or
nothing carries h_p to h_(p+1)."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from _tiny_cp import tiny_code_predictor
from rvqspec.cli import app
from rvqspec.measure.extract import ExtractConfig, extract
from rvqspec.measure.geometry import GeometryError, hidden_geometry

P, H = 15, 8


def batches_of(h: torch.Tensor, sizes) -> list:
    out, lo = [], 0
    for s in sizes:
        out.append((h[lo:lo + s].float(), torch.zeros(s, 16, dtype=torch.long)))
        lo += s
    assert lo == h.shape[0]
    return out


def direct(h: torch.Tensor, seed: int):
    """All frames in memory, least squares on X itself: the formula the streamed sums expand."""
    h = h.double()
    n = h.shape[0]
    mu = h.mean(0)
    cos = torch.nn.functional.cosine_similarity(mu[:-1], mu[1:], dim=-1)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    fit, test = h[perm[: n // 2]], h[perm[n // 2:]]
    shift, affine = [], []
    for p in range(h.shape[1] - 1):
        y = test[:, p + 1]
        sst = (y - mu[p + 1]).pow(2).sum()
        shift.append(float(1 - (y - test[:, p] - (mu[p + 1] - mu[p])).pow(2).sum() / sst))
        x = torch.cat([fit[:, p], torch.ones(len(fit), 1, dtype=h.dtype)], 1)
        w = torch.linalg.lstsq(x, fit[:, p + 1]).solution
        xt = torch.cat([test[:, p], torch.ones(len(test), 1, dtype=h.dtype)], 1)
        affine.append(float(1 - (y - xt @ w).pow(2).sum() / sst))
    return cos.tolist(), shift, affine


def world(kind: str, n: int = 600, seed: int = 0) -> torch.Tensor:
    """(n, P, H) hidden states where h_(p+1) is h_p plus one shift ("shift"), a rotation of h_p
    ("rotation": an affine map, no shift), or drawn afresh ("independent": nothing carries over)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.empty(n, P, H)
    h[:, 0] = torch.randn(n, H, generator=g) * 2
    for p in range(1, P):
        noise = 0.05 * torch.randn(n, H, generator=g)
        if kind == "shift":
            h[:, p] = h[:, p - 1] + torch.randn(H, generator=g) + noise
        elif kind == "rotation":
            q, _ = torch.linalg.qr(torch.randn(H, H, generator=g))
            h[:, p] = h[:, p - 1] @ q + noise
        else:
            h[:, p] = torch.randn(n, H, generator=g) * 2 + 3 * torch.randn(H, generator=g)
    return h


def test_streamed_sums_equal_the_direct_computation():
    h = world("rotation", n=301, seed=3) + 0.3 * torch.randn(301, P, H, generator=torch.Generator().manual_seed(1))
    geo = hidden_geometry(batches_of(h, [100, 7, 150, 44]), frames=301, seed=5)
    cos, shift, affine = direct(h, seed=5)
    assert geo.position_mean_cosine == pytest.approx(cos, abs=1e-6)
    assert geo.shift_r2 == pytest.approx(shift, abs=1e-6)
    assert geo.affine_r2_heldout == pytest.approx(affine, abs=1e-5)
    # the split is the seed's: another seed scores other frames
    assert hidden_geometry(batches_of(h, [301]), frames=301, seed=6).affine_r2_heldout != pytest.approx(affine, abs=1e-6)


def test_the_measures_tell_the_three_worlds_apart():
    shift = hidden_geometry(batches_of(world("shift"), [600]), 600).to_json()
    rotation = hidden_geometry(batches_of(world("rotation"), [600]), 600).to_json()
    independent = hidden_geometry(batches_of(world("independent"), [600]), 600).to_json()
    # one shift carries h_p over: both R^2 near 1
    assert shift["shift_r2_mean"] > 0.95 and shift["affine_r2_mean"] > 0.95
    # a rotation: only the affine map carries it; a shift explains less than the mean does
    assert rotation["affine_r2_mean"] > 0.95 and rotation["shift_r2_mean"] < 0
    # nothing carries over: R^2 of a shift about -1 (the variance of h_p adds to h_(p+1)'s), affine about 0
    assert independent["shift_r2_mean"] < -0.5 and abs(independent["affine_r2_mean"]) < 0.1
    assert abs(independent["position_mean_cosine_mean"]) < 0.5
    assert len(shift["position_mean_cosine"]) == P - 1 and "shift per pair" in shift["reading"]


@pytest.mark.parametrize("sizes, frames, words", [([10, 10], 30, "20 frames"), ([10, 10], 15, "more than"),
                                                  ([3], 3, "at least 4")])
def test_frame_counts_that_do_not_add_up_are_refused(sizes, frames, words):
    h = world("shift", n=sum(sizes))
    with pytest.raises(GeometryError, match=words):
        hidden_geometry(batches_of(h, sizes), frames)


def test_shapes_that_change_between_batches_are_refused():
    a, b = torch.randn(5, P, H), torch.randn(5, P, H + 1)
    with pytest.raises(GeometryError, match=r"\(5, 15, 9\)"):
        hidden_geometry([(a,), (b,)], 10)


def test_cli_reads_a_shard_folder(tmp_path):
    torch.set_num_threads(1)
    cp = tiny_code_predictor(vocab=16, hidden=32, talker_hidden=48, seed=4)
    g = torch.Generator().manual_seed(0)
    utts = [(torch.randn(30, 48, generator=g), torch.randint(0, 16, (30, 16), generator=g)) for _ in range(4)]
    extract(cp, utts, tmp_path / "calib", source="teacher_forced", config=ExtractConfig(shard_frames=50, dtype="float32"),
            progress=False)
    out = tmp_path / "geometry.json"
    r = CliRunner().invoke(app, ["spec", "geometry", "--shards", str(tmp_path / "calib"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["frames"] == 120 and res["hidden_size"] == 32 and res["source"] == "teacher_forced"
    assert len(res["shift_r2"]) == 14 and all(-1 <= c <= 1 for c in res["position_mean_cosine"])
    assert "shift_r2_mean" in r.output  # the summary names the means
    bad = CliRunner().invoke(app, ["spec", "geometry", "--shards", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "nowhere" in bad.output and "Traceback" not in bad.output


def test_figure_draws_the_three_measures_per_pair():
    from rvqspec.workbench.plots import geometry_figure

    fig = geometry_figure(hidden_geometry(batches_of(world("rotation"), [600]), 600).to_json())
    assert [len(t.x) for t in fig.data] == [P - 1] * 3
    assert min(fig.data[1].y) < 0 < min(fig.data[2].y), "the rotation world: shift below 0, affine above"
