"""`rvqspec bench stream`: streaming TTFA / RTF / calls per second of audio, AR and speculative side
by side (`rvqspec.mini.bench_stream`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.commands.bench import bench_app
from rvqspec.core.defaults import DRAFTER_PREFERENCE
from rvqspec.export.backends import make_inner
from rvqspec.export.talker import make_talker_steps


STREAM_BACKENDS = ("eager", "onnx", "onnx-loop")  # `make_talker_steps`' backends: compiled measured slower


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _shown(p: Path) -> str:
    """A path as written into committed results: relative to the repository when inside it."""
    from rvqspec.mini.pipeline import default_data_dir

    root = default_data_dir().parents[1]
    try:
        return str(Path(p).resolve().relative_to(root))
    except ValueError:
        return str(p)


def default_spec_files(data: Path, budget: Optional[int]) -> tuple[Path, Path]:
    """The committed drafter and tree the bench uses when none is named: the first drafter of
    DRAFTER_PREFERENCE that is committed, and its tree at `budget`, else at the N that the
    committed `bench spec` run chose as fastest on this machine (data/mini/bench/spec.json)."""
    from rvqspec.core.defaults import BUDGET

    name = next((n for n in DRAFTER_PREFERENCE if (data / "drafters" / f"{n}.safetensors").is_file()), None)
    if name is None:
        _fail(f"{data / 'drafters'}: no committed drafter ({', '.join(DRAFTER_PREFERENCE)})")
    if budget is None:
        spec_json = data / "bench" / "spec.json"
        try:
            budget = int(json.loads(spec_json.read_text())["full_size"]["chosen_N"]) if spec_json.is_file() else BUDGET
        except (KeyError, ValueError, TypeError, json.JSONDecodeError):
            budget = BUDGET
    tree = data / "trees" / f"{name}_n{budget}.json"
    if not tree.is_file():
        trees = sorted(p.name for p in (data / "trees").glob(f"{name}_n*.json"))
        _fail(f"{tree}: no committed tree for drafter {name!r} at --budget {budget} (have: {', '.join(trees) or 'none'})")
    return data / "drafters" / f"{name}.safetensors", tree


def register(app: typer.Typer) -> None:
    @bench_app.command("stream")
    def bench_stream_cmd(
            model: Optional[Path] = typer.Option(None, "--model", help="Mini model dir (default data/mini/model)."),
            drafter: Optional[Path] = typer.Option(None, "--drafter", help="Drafter .safetensors (default: committed)."),
            tree: Optional[Path] = typer.Option(None, "--tree", help="Tree JSON (default: committed, see --budget)."),
            budget: Optional[int] = typer.Option(None, "--budget", help="Tree size N of the committed tree."),
            repeats: int = typer.Option(2, "--repeats", help="Passes over the benchmark sentences."),
            sentences: int = typer.Option(4, "--sentences", help="How many of the benchmark sentences (1-4)."),
            chunk_frames: int = typer.Option(4, "--chunk-frames", help="Frames (80 ms) per decoded chunk."),
            threaded: bool = typer.Option(False, "--threaded/--sequential",
                                          help="Frame loop in a producer thread, codec decoding overlapping it."),
            full_size: bool = typer.Option(True, "--full-size/--no-full-size",
                                           help="Also project the full-size (0.6B, random weights) architecture."),
            threads: Optional[int] = typer.Option(None, "--threads", help="torch threads (default: torch's)."),
            backend: str = typer.Option("eager", "--backend",
                                        help="eager | onnx | onnx-loop: onnx runs the talker step, the AR frame "
                                             "and the speculative round as single graph calls, onnx-loop the whole "
                                             "speculative frame (rvqspec.export)."),
            graph_threads: int = typer.Option(1, "--graph-threads",
                                              help="onnxruntime intra-op threads per graph (onnx backend)."),
            temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
            greedy: bool = opt.greedy(),
            seed: int = typer.Option(0, "--seed", help="Seed of the sampling generator."),
            out: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON here (atomically)."),
            as_json: bool = typer.Option(True, "--json/--no-json", help="JSON on stdout (the only output format).")):
        """Stream the benchmark sentences with AR and speculative decoding, interleaved; print
        {"ar": {...}, "spec": {...}, ...} with ttfa_ms_p50/p95, rtf, calls per second of audio and
        host_ms_per_frame."""
        import torch

        from rvqspec.core.drafters import load_drafter
        from rvqspec.core.jsonfile import write_json_atomic
        from rvqspec.core.speculative import SpeculativeCodePredictor
        from rvqspec.core.tree import SparseTree
        from rvqspec.mini.bench_stream import SEED_TOKENS_PER_CALL, SENTENCES, bench_stream, full_size_projection
        from rvqspec.mini.pipeline import MiniTTS, default_data_dir
        from rvqspec.mini.stream import StreamConfig

        if threads is not None:
            if threads < 1:
                _fail(f"--threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if repeats < 1 or chunk_frames < 1:
            _fail(f"--repeats and --chunk-frames must be >= 1, got {repeats} and {chunk_frames}")
        if not 1 <= sentences <= len(SENTENCES):
            _fail(f"--sentences must lie in [1, {len(SENTENCES)}], got {sentences}")
        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        data = default_data_dir()
        if (drafter is None) != (tree is None):
            d_def, t_def = default_spec_files(data, budget)
            drafter, tree = drafter or d_def, tree or t_def
        elif drafter is None:
            drafter, tree = default_spec_files(data, budget)
        for p in (drafter, tree):
            if not p.is_file():
                _fail(f"{p}: no such file")
        if backend not in STREAM_BACKENDS:
            _fail(f"--backend must be one of {', '.join(STREAM_BACKENDS)}, got {backend!r}")
        if graph_threads < 1:
            _fail(f"--graph-threads must be >= 1, got {graph_threads}")
        try:
            tts = MiniTTS.load(data, model_dir=model)
            d, t = load_drafter(drafter), SparseTree.load(tree)
            if backend == "eager":
                spec, ar, steps = SpeculativeCodePredictor(tts.code_predictor, d, t), None, None
            else:  # compiles / exports here, before anything is timed
                spec = make_inner(backend, tts.code_predictor, d, t, threads=graph_threads)
                ar = make_inner(backend, tts.code_predictor, threads=graph_threads)
                steps = make_talker_steps(backend, tts.talker, threads=graph_threads)
        except (OSError, ValueError) as e:
            _fail(str(e).splitlines()[0])
        res = bench_stream(tts, spec, SENTENCES[:sentences], repeats=repeats, config=StreamConfig(chunk_frames=chunk_frames, threaded=threaded),
                           seed=seed, sampling=sampling, ar=ar, talker_steps=steps, backend=backend)
        res["config"] = {"model": _shown(tts.model_dir), "drafter": _shown(drafter), "tree": _shown(tree),
                         "tree_nodes": len(SparseTree.load(tree).paths), "chunk_frames": chunk_frames,
                         "threaded": threaded, "threads": torch.get_num_threads(), "repeats": repeats,
                         "backend": backend, "graph_threads": graph_threads if backend != "eager" else None,
                         "sentences": [t for t, _ in SENTENCES[:sentences]],
                         "sampling": {"do_sample": sampling.do_sample, "top_k": sampling.top_k,
                                      "top_p": sampling.top_p, "temperature": sampling.temperature}}
        if full_size:
            from rvqspec.core.defaults import BUDGET

            sources = {f"seed 000 Table 2 (iii) offsets, N={BUDGET}": SEED_TOKENS_PER_CALL}
            acc = data / "bench" / "acceptance.json"
            try:
                tpc = json.loads(acc.read_text())["drafters"]["offsets"]["by_language"]["en"][str(BUDGET)]
                sources[f"{_shown(acc)} offsets en N={BUDGET} (mini, measured)"] = float(tpc["tokens_per_call"])
            except (OSError, KeyError, ValueError, TypeError):
                pass  # the seed's figure alone
            res["full_size"] = full_size_projection(sources, budget=BUDGET, chunk_frames=chunk_frames)
        if out is not None:
            write_json_atomic(out, res, indent=2)
        typer.echo(json.dumps(res, indent=2))
