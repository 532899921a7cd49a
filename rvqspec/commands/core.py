"""Core commands: `rvqspec info PATH` and `rvqspec bench ar` (heavy imports inside the bodies)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.commands.bench import bench_app
from rvqspec.real.bench_ar import ONNX_FRAME_VARIANTS, BenchARConfig

_BENCH = BenchARConfig()  # the one place the bench defaults live


def _fmt_count(n: int) -> str:
    return f"{n / 1e6:,.2f} M" if n >= 1e5 else f"{n:,}"


def register(app: typer.Typer) -> None:
    @app.command("info")
    def info(model: Optional[Path] = opt.model(None, "Checkpoint folder in the official layout "
                                                      "(config.json + model.safetensors)."),
             path: Optional[Path] = typer.Argument(None, hidden=True, help="The checkpoint, as --model."),
             as_json: bool = opt.as_json("Print JSON instead of tables.")) -> None:
        """Architecture, parameter counts and per-call weight bytes of a Qwen3-TTS checkpoint."""
        from rvqspec.core.checkpoint import checkpoint_info

        model = model or path
        if model is None:
            raise typer.BadParameter("give the checkpoint with --model PATH")
        data = checkpoint_info(model)
        if as_json:
            typer.echo(json.dumps(data, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        con = Console()
        con.print(f"[bold]{data['path']}[/]  type={data['tts_model_type']} size={data['tts_model_size']} "
                  f"stored dtype={data['stored_dtype']}")
        arch = Table("", "talker", "code predictor", title="architecture")
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "intermediate_size", "vocab_size", "rope_theta"):
            arch.add_row(k, str(data["talker"][k]), str(data["code_predictor"][k]))
        arch.add_row("other", f"text vocab {data['talker']['text_vocab_size']} x {data['talker']['text_hidden_size']}, "
                     f"M-RoPE {data['talker']['mrope_section']}",
                     f"{data['code_predictor']['num_code_groups'] - 1} heads/tables, projection="
                     f"{data['code_predictor']['small_to_mtp_projection']}")
        con.print(arch)
        params = Table("part", "group", "parameters", title="parameters")
        for part, groups in data["parameters"].items():
            for g, n in groups.items():
                params.add_row(part, g, _fmt_count(n))
        con.print(params)
        call = data["code_predictor_call"]
        con.print(f"code predictor call reads {_fmt_count(call['params']['total'])} parameters = "
                  f"{call['bytes_stored_dtype'] / 1e6:.1f} MB stored ({call['bytes_bfloat16'] / 1e6:.1f} MB bf16, "
                  f"{call['bytes_float32'] / 1e6:.1f} MB fp32): {call['counts']}")

    @bench_app.command("ar")
    def bench_ar(
        calls: int = typer.Option(_BENCH.calls, help="Timed single-step calls (spread over the rounds)."),
        frames: int = typer.Option(_BENCH.frames, help="Timed rounds: frames of ours and of the official loop each."),
        warmup: int = typer.Option(_BENCH.warmup, help="Untimed warm-up rounds."),
        dtypes: Optional[List[str]] = typer.Option(None, "--dtype", help="Dtype to time (repeatable); default "
                                                   + " and ".join(_BENCH.dtypes) + "."),
        threads: int = opt.threads(_BENCH.threads, "torch.set_num_threads for the run."),
        preset: str = opt.model(_BENCH.preset, "CodePredictorConfig preset name (random weights)."),
        official: bool = typer.Option(_BENCH.official, help="Also time the official HF generate loop."),
        compiled: bool = typer.Option(_BENCH.compiled, help="Also time the compiled predictor "
                                      "(rvqspec.CompiledCodePredictor; needs a C++ compiler, compiles ~1 min)."),
        frame_graph: bool = typer.Option(_BENCH.frame_graph, "--frame-graph", help="Also time the whole frame as "
                                         "ONE compiled graph call (rvqspec.export.wrappers.FrameGraph)."),
        onnx_frame: Optional[List[str]] = typer.Option(None, "--onnx-frame", help="Also time the whole frame as "
                                                       "ONE onnxruntime call: fp32 | w8 (8-bit weights, int8 dot "
                                                       "products; rvqspec.export.quantize); repeatable; float32 only."),
        as_json: bool = opt.as_json("Print only JSON on stdout (progress on stderr)."),
        out: Optional[Path] = opt.out(),
    ) -> None:
        """AR code-predictor latency: ours vs the official generate loop vs the bandwidth floor."""
        from rvqspec.core.jsonfile import write_json_atomic
        from rvqspec.real.bench_ar import run_bench_ar

        bc = replace(_BENCH, calls=calls, frames=frames, warmup=warmup, threads=threads, preset=preset,
                     official=official, compiled=compiled, frame_graph=frame_graph,
                     onnx_frame=tuple(onnx_frame or ()), dtypes=tuple(dtypes) if dtypes else _BENCH.dtypes)
        bad = [v for v in bc.onnx_frame if v not in ONNX_FRAME_VARIANTS]
        if bad:
            typer.echo(f"error: --onnx-frame must be one of {', '.join(ONNX_FRAME_VARIANTS)}, got {bad[0]!r}", err=True)
            raise typer.Exit(2)
        result = run_bench_ar(bc)
        if out is not None:
            write_json_atomic(out, result, indent=2)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        for name, r in result["dtypes"].items():
            line = (f"{name}: step {r['ours_step_ms']:.2f} ms, frame {r['ours_frame_ms']:.1f} ms "
                    f"({r['ours_frame_per_call_ms']:.2f} ms/call), bandwidth {r['read_bandwidth_GBps']:.1f} GB/s, "
                    f"floor {r['floor_ms']:.2f} ms (step {r['ours_step_over_floor']:.2f}x floor)")
            if "official_frame_ms" in r:
                line += (f", official {r['official_frame_ms']:.1f} ms/frame ({r['official_per_call_ms']:.2f} ms/call), "
                         f"frame speed-up {r['speedup_frame_vs_official']:.2f}x")
            if "compiled_frame_ms" in r:
                line += (f"; compiled: step {r['compiled_step_ms']:.2f} ms ({r['compiled_step_over_floor']:.2f}x floor), "
                         f"{r['compiled_frame_per_call_ms']:.2f} ms/call")
                if "compiled_speedup_frame_vs_official" in r:
                    line += f", speed-up vs official {r['compiled_speedup_frame_vs_official']:.2f}x"
            typer.echo(line)
        typer.echo(f"targets: {result['targets_met']}")
