"""Speculative code predictor: one fused draft+verify call per round (seed 000 §2.2, Figures 2-3).

Round structure (docs/design.md indexing). The prefill [h_talker, emb(c0)] (positions 0, 1) gives
c1's distribution at h_1 and, through the drafter, drafts for c2..c4. Then, with c_m the token just
sampled ("committed", not yet in the cache):

* ONE model call of query length q = N + 1: index 0 = c_m at position m + 1, tree node i = the
  drafted token for c_{m+d} (d = depth of i) at position m + 1 + d, written to cache slots
  m + 1 .. m + 1 + N; the additive mask shows each query the committed prefix (slots <= m) and its
  tree ancestors and itself (`SparseTree.buffers().mask`, Figure 2). Node i is read by the verifier
  LM head m + d (it emits c_{m+d+1}); nodes for codes past c15 are computed (static shapes) but
  never accepted.
* lossless verification along the tree (`rvqspec.core.verify`) accepts a path of a nodes and emits one
  more token (residual sample or bonus); codes c_{m+1}..c_{m+a+1} are final.
* the hidden state of the last accepted node, at position m + a + 1, gives both the distribution of
  the emitted token (already used) and, through the drafter, the drafts of the next round: no
  separate drafting call (Figure 3).
* the cache keeps only the accepted path: accepted node columns move to slots m + 2 .. m + a + 1.

Calls per frame = 1 (prefill) + rounds; tokens per call = 15 / calls (AR: 15 calls).
Everything that depends only on (tree, start position) -- masks, positions, slots, LM head and
embedding-table indices, valid flags -- is built once per tree, so host work per round is a few
small tensor ops and a few host reads of q-sized results (B = 1; a batch B > 1 runs row by row).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from rvqspec.core.drafters import Drafter
from rvqspec.core.model import decoder_stack, rms_norm
from rvqspec.core.sampling import Sampling, probs, warp_logits
from rvqspec.core.tree import SparseTree, TreeError
from rvqspec.core.verify import AcceptTables, accept, gumbel_max, gumbel_noise, verify_walk


class NonFiniteHiddenError(ValueError):
    """The talker hidden state handed to the speculative decoder holds NaN or inf."""


NEG_INF = float("-inf")


@dataclass
class RoundInfo:
    """What the callback receives after each verify round."""

    start: int                 # m: index of the committed code c_m fed at index 0
    accepted: int              # a: accepted drafted nodes
    path: list[int]            # accepted node indices (tree order), root excluded
    tokens: list[int]          # codes emitted this round: c_{m+1}..c_{m+a} (+ c_{m+a+1} unless past c15)


@dataclass
class SpecStats:
    calls: int = 0
    accepted_lengths: list[int] = field(default_factory=list)   # a per round
    frames: int = 0

    @property
    def tokens_per_call(self) -> float:
        return 15 * max(self.frames, 1) / max(self.calls, 1)

    def merge(self, other: "SpecStats") -> None:
        self.calls += other.calls
        self.accepted_lengths.extend(other.accepted_lengths)
        self.frames += other.frames


@dataclass
class _Plan:
    """Per-tree constants for every start index m = 1..14 (lists indexed by m)."""

    q: int
    max_len: int
    tok_index: torch.Tensor          # (N,) flat index into the drafts' top-R table (depth-1)*R + rank
    R: int
    spans: list                      # per depth d: (lo, hi) node index range (canonical order keeps depths contiguous)
    parent: torch.Tensor             # (q,) long, root's parent clamped to 0
    tables: AcceptTables             # the acceptance rule's per-tree constants
    masks: list                      # m -> (1, 1, q, max_len) additive
    positions: list                  # m -> (1, q) long
    rope: list                       # m -> (cos, sin) each (1, 1, q, head_dim)
    slots: list                      # m -> (q,) long
    valid: list                      # m -> (q,) bool node token within c1..c15


class SpeculativeCodePredictor:
    """Drop-in for `MultiCodeDecoder.generate_frame` with RVQ position-aware speculation."""

    def __init__(self, code_predictor, drafter: Drafter, tree: SparseTree, rule: str = "sampled",
                 _control: str | None = None, compile=None):
        if len(tree) == 0:
            raise ValueError("the draft tree is empty; use the AR MultiCodeDecoder.generate_frame instead")
        if tree.max_depth > drafter.num_offsets:
            raise ValueError(f"tree depth {tree.max_depth} exceeds the drafter's K={drafter.num_offsets}")
        if rule not in ("sampled", "walk"):
            raise ValueError(f"rule must be 'sampled' or 'walk', got {rule!r}")
        self.code_predictor = code_predictor
        self.drafter = drafter
        self.tree = tree
        self.rule = rule
        self._control = _control  # tests only: a deliberately wrong acceptance rule (see verify_walk)
        if _control is not None and rule != "walk":
            raise ValueError("_control needs rule='walk'")
        self.buffers = tree.buffers()
        vocab = code_predictor.config.vocab_size
        if self.buffers.max_rank > vocab:  # a rank r drafts the (r+1)-th most likely of V codes
            bad = max(tree.paths, key=lambda p: max(p))
            raise TreeError(f"tree path {list(bad)} has rank {max(bad)} but the code predictor has only "
                            f"{vocab} codes (ranks 0..{vocab - 1})")
        self.num_codes = code_predictor.config.num_code_groups - 1  # 15
        self._dims = code_predictor.stack_dims
        self._plans: dict = {}
        self._state: dict = {}
        self.last_cache = None        # the cache after the last frame (tests inspect compaction)
        self.last_filled = 0          # slots 0..last_filled-1 hold the accepted prefix
        # compile (a rvqspec.core.compiled.CompileConfig): the fused verify call's decoder stack runs as
        # one static-shape Inductor graph with frozen weights (q = N+1 is fixed per tree)
        self._compiled = None
        if compile is not None:
            from rvqspec.core.compiled import CompiledBackbone

            self._compiled = CompiledBackbone(code_predictor.eval(), compile)

    # ---- per-tree constants ----------------------------------------------------------------------
    def _plan(self, dtype: torch.dtype, device) -> _Plan:
        key = (dtype, device)
        if key in self._plans:
            return self._plans[key]
        b = self.buffers
        n = self.num_codes
        q = b.q
        max_len = n + 1 + q  # start <= n, tree slots start..start+N
        R = max(b.max_rank, 1)
        depth = b.depth
        tok_index = ((depth[1:] - 1) * R + b.rank[1:]).clone().to(device)  # (N,)
        spans = []
        for d in range(b.max_depth + 1):
            idx = (depth == d).nonzero().flatten()
            spans.append((int(idx.min()), int(idx.max()) + 1))
        masks, positions, rope, slots, valid = [None], [None], [None], [None], [None]
        cols = torch.arange(max_len)
        for m in range(1, n):
            start = m + 1
            allowed = (cols < start).expand(q, max_len).clone()  # (q, max_len) committed prefix visible
            allowed[:, start:start + q] = b.mask  # tree part: ancestors and self (Figure 2)
            mask = torch.zeros(q, max_len, dtype=dtype).masked_fill(~allowed, NEG_INF)  # (q, max_len)
            masks.append(mask.view(1, 1, q, max_len).to(device))
            pos = (start + depth).view(1, q).to(device)  # (1, q)
            positions.append(pos)
            rope.append(self.code_predictor.rope(pos, dtype))
            slots.append(torch.arange(start, start + q, device=device))  # (q,)
            valid.append((m + depth <= n).to(device))  # (q,)
        plan = _Plan(q=q, max_len=max_len, tok_index=tok_index, R=R, spans=spans,
                     parent=b.parent.clamp(min=0).to(device), tables=AcceptTables.of(b, device), masks=masks,
                     positions=positions, rope=rope, slots=slots, valid=valid)
        self._plans[key] = plan
        return plan

    def _cache(self, dtype, device):
        key = (dtype, device)
        st = self._state.get(key)
        if st is None:
            cp = self.code_predictor
            L = self._plan(dtype, device).max_len
            pos = torch.arange(2, device=device)
            prefill_mask = torch.zeros(1, 1, 2, L, dtype=dtype, device=device)
            prefill_mask[..., 2:] = NEG_INF
            prefill_mask[0, 0, 0, 1] = NEG_INF
            st = dict(cache=cp.new_cache(1, L, dtype, device), prefill_pos=pos.view(1, 2), prefill_slots=pos,
                      prefill_mask=prefill_mask)
            self._state = {key: st}
        return st

    # ---- pieces (also used by tests) ---------------------------------------------------------------
    def prefill(self, cache, talker_hidden: torch.Tensor, c0: torch.Tensor):
        """Positions 0, 1 -> (logits of c1 (1, V), hidden at position 1 (1, 1, H))."""
        cp = self.code_predictor
        st = self._cache(cache.k.dtype, cache.k.device)
        dtype = cache.k.dtype
        x = torch.cat([talker_hidden.to(dtype), cp.c0_embedding(c0).to(dtype)], dim=1)  # (1, 2, E)
        hidden, _ = cp(x, st["prefill_pos"], cache, st["prefill_slots"], st["prefill_mask"])
        h1 = hidden[:, 1:2]  # (1, 1, H)
        return F.linear(h1[:, 0], cp.lm_head[0].weight), h1

    def draft_tokens(self, hidden: torch.Tensor, p: int) -> torch.Tensor:
        """hidden (1, 1, H) at position p -> tree node tokens (N,) long (top-R per drafted depth)."""
        pl = self._plan(hidden.dtype, hidden.device)
        logits = self.drafter.draft_logits(self.code_predictor, hidden, p)[0]  # (K, V)
        top = logits.topk(pl.R, dim=-1).indices  # (K, R)
        return top.reshape(-1)[pl.tok_index]  # (N,)

    def verify_call(self, cache, m: int, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The fused round call for committed c_m: tokens (1, q) long = [c_m, tree node tokens] ->
        (hidden (1, q, H), verifier logits (1, q, V); zeros for nodes past c15).

        Node i carries c_{m+d} (d = its depth): embedding table m+d, position m+1+d, LM head m+d.
        Canonical tree order keeps each depth contiguous, so tables and heads are applied per depth
        span (D + 1 lookups and matmuls, no per-node host work)."""
        cp = self.code_predictor
        n = self.num_codes
        pl = self._plan(cache.k.dtype, cache.k.device)
        tables, heads, layers, norm_w = self._weights()
        parts = []
        for d, (lo, hi) in enumerate(pl.spans):
            g = min(m + d, n)  # nodes past c15 (never accepted) reuse the last table: static shapes
            parts.append(F.embedding(tokens[:, lo:hi], tables[g]))  # (1, hi-lo, E)
        x = torch.cat(parts, 1).to(cache.k.dtype)  # (1, q, E)
        cos, sin = pl.rope[m]
        if self._compiled is not None:  # projection, layers and final norm in one compiled graph
            hidden = self._compiled(x, cos, sin, pl.masks[m], pl.slots[m], cache.k, cache.v)  # (1, q, H)
        else:
            x = decoder_stack(layers, cp.small_to_mtp_projection(x), cos, sin, cache, pl.slots[m], pl.masks[m],
                              *self._dims)
            hidden = rms_norm(x, norm_w, self._dims[3])  # (1, q, H)
        parts = []
        for d, (lo, hi) in enumerate(pl.spans):
            if m + d <= n - 1:  # LM head m+d emits c_{m+d+1}
                parts.append(F.linear(hidden[:, lo:hi], heads[m + d]))  # (1, hi-lo, V)
            else:  # past c15: no head; zeros keep the shape static (never used)
                parts.append(hidden.new_zeros(1, hi - lo, cp.config.vocab_size))
        logits = torch.cat(parts, 1) if len(parts) > 1 else parts[0]  # (1, q, V)
        return hidden, logits

    def _lookup_weights(self):
        """Embedding tables (c0 first), LM head weights, layers, final norm weight."""
        cp = self.code_predictor
        return ([cp.c0_embedding.weight] + [e.weight for e in cp.model.codec_embedding],
                [h.weight for h in cp.lm_head], cp.model.layers, cp.model.norm.weight)

    def _weights(self):
        """The frame's weight lookups (made once per frame, not through nn.Module attribute access on
        every call: host overhead); looked up afresh outside a frame (tests call verify_call directly)."""
        return self._state.get("weights") or self._lookup_weights()

    # ---- the frame loop ------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = Sampling(),
                       generator: torch.Generator | None = None,
                       callback: Callable[[RoundInfo], None] | None = None) -> tuple[torch.Tensor, SpecStats]:
        """talker_hidden (B, 1, E), c0 (B, 1) -> (codes c1..c15 (B, 15) long, stats). Rows run one by one."""
        if talker_hidden.dim() != 3 or talker_hidden.shape[1] != 1:
            raise ValueError(f"talker_hidden must be (B, 1, E), got {tuple(talker_hidden.shape)}")
        B = talker_hidden.shape[0]
        if c0.shape != (B, 1):
            raise ValueError(f"c0 must be (B, 1) = ({B}, 1), got {tuple(c0.shape)}")
        if not torch.isfinite(talker_hidden).all():  # NaN logits would otherwise decode as all-zero codes
            rows = (~torch.isfinite(talker_hidden)).flatten(1).any(1).nonzero().flatten().tolist()  # (bad rows,)
            raise NonFiniteHiddenError(f"talker_hidden (B, 1, E) = {tuple(talker_hidden.shape)} has NaN or inf "
                                       f"values in rows {rows}")
        if B == 1:
            return self._frame(talker_hidden, c0, sampling, generator, callback)
        outs, stats = [], SpecStats()
        for b in range(B):
            codes, st = self._frame(talker_hidden[b:b + 1], c0[b:b + 1], sampling, generator, callback)
            outs.append(codes)
            stats.merge(st)
        return torch.cat(outs, 0), stats

    def _frame(self, talker_hidden, c0, sampling, generator, callback):
        cp = self.code_predictor
        n = self.num_codes
        dtype = next(cp.parameters()).dtype
        device = talker_hidden.device
        pl = self._plan(dtype, device)
        cache = self._cache(dtype, device)["cache"]
        self._state["weights"] = self._lookup_weights()  # once per frame (weights may change between frames)
        greedy = not sampling.do_sample
        codes = [0] * (n + 1)  # c0..c15 as ints (slot 0 unused)
        stats = SpecStats(frames=1)
        V = cp.config.vocab_size

        def noise(rows: int) -> torch.Tensor:  # (rows, V) Gumbel noise from the caller's generator; greedy: 0
            if greedy:
                return torch.zeros(rows, V, device=device)
            return gumbel_noise((rows, V), generator, device)

        # prefill: c1 ~ p(h_1) and drafts for c2..c4 from the same hidden state (Figure 3)
        logits1, h = self.prefill(cache, talker_hidden, c0)
        # c1 takes row 1 (node (0,)) of a (q, V) block: the draws of the export graphs' round 0
        committed = gumbel_max(warp_logits(logits1, sampling), noise(pl.q)[1:2])  # (1,)
        stats.calls = 1
        m = 1
        codes[1] = int(committed)
        nodes = self.draft_tokens(h, 1)  # (N,)
        filled = 2
        t = pl.tables
        while True:
            tokens = torch.cat([committed, nodes]).view(1, pl.q)  # (1, q) [c_m, drafts]
            hidden, logits = self.verify_call(cache, m, tokens)
            stats.calls += 1
            if self.rule == "walk":
                p = probs(logits, sampling)  # (1, q, V) the verifier's deployed distribution per node
                res = verify_walk(p, tokens, self.buffers, pl.valid[m], generator=generator, greedy=greedy,
                                  _control=self._control)
                path = res.path[0, 1:1 + int(res.accepted[0])].tolist()
                y_next = res.token  # (1,)
            else:  # THE acceptance rule (rvqspec.core.verify.accept), one Gumbel sample per node
                _, ok, _, y_next = accept(warp_logits(logits, sampling), noise(pl.q).unsqueeze(0), tokens,
                                               pl.valid[m], t.parent, t.strict_anc, t.depth, t.sibling_before)
                okl = ok[0].tolist()  # (q,) one host read; canonical order lists the chain by depth
                path = [i for i in range(1, pl.q) if okl[i]]
            a = len(path)
            last = path[-1] if a else 0
            start = m + 1
            if a:
                tok_list = tokens[0].tolist()
                for k, node in enumerate(path):
                    codes[m + 1 + k] = tok_list[node]
            if a and path != list(range(1, a + 1)):
                # compaction: accepted columns start+path[k] -> start+k+1 (Figure 2, green path)
                src = torch.tensor(path, device=device) + start
                dst = torch.arange(start + 1, start + 1 + a, device=device)
                cache.move(src, dst)
            stats.accepted_lengths.append(a)
            m_new = m + a + 1  # index of the emitted token
            if m_new <= n:
                committed = y_next  # (1,)
                codes[m_new] = int(committed)
            filled = start + a + 1
            if callback is not None:
                callback(RoundInfo(start=m, accepted=a, path=path,
                                   tokens=codes[m + 1:min(m_new, n) + 1]))
            m = m_new
            if m >= n:
                break
            nodes = self.draft_tokens(hidden[:, last:last + 1], m)  # next drafts from the last accepted node
        self.last_cache, self.last_filled = cache, filled
        self._state["weights"] = None
        return torch.tensor(codes[1:], device=device).view(1, n), stats
