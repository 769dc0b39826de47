"""Train the embedded zoo from local text only (no hub, no download), seeded.

    python -m specgate.zoo.train [--out fixtures/zoo] [--quick]

1. Corpus, all from the running interpreter: the standard library's sources (code), the documentation
   that ships with it (pydoc_data topics) and its docstrings (prose), JSON/CSV/INI renderings of
   tables the standard library carries (HTTP statuses, MIME types, errno, Unicode names, ...), and
   "same code with a name renamed" pairs made from standard-library functions (copy-heavy edits).
2. The target (a Llama, tokenizer from build.py) is trained on it with next-token loss, plus windows in
   which a passage repeats itself (so it learns to copy) and, late in training, unlikelihood on prose
   (so its greedy prose loops less).
3. Every drafter is trained on the target's outputs over the same stream, jointly (one target forward
   feeds all of them): the draft model (distilled), EAGLE-1 and EAGLE-3 heads (unrolled over the
   profile's 3 speculative steps, each step reading the previous step's own state, as vLLM runs them),
   Medusa heads and MiMo's MTP layer (the target's weights kept verbatim).
4. target_perturbed = the trained target plus relative noise, tuned to ~80 % greedy agreement.
5. Offline checks on fixtures/prompts/embedded.jsonl (teacher-forced against the target's own greedy
   continuations) go into fixtures/zoo/training.json and MODEL_CARD.md next to the weights; then
   `python -m specgate.zoo.measure` adds what vLLM measures (acceptance per category, speed at C=1).

Weights are stored as float16 (the profile computes in float32; float16 values are exact in float32).
Same interpreter, torch and CPU type give the same files; other CPUs may differ in the last bits.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

from specgate.zoo import EVAL_PROMPTS, ZOO_MODELS, prompts_digest, zoo_dir
from specgate.zoo import build
from specgate.zoo.card import write_card

SEED = 20240601
SEQ = 512
BATCH = 8
# History (the README's "The embedded zoo" has the numbers): 6 layers x 192, 2100 steps at lr 3e-3
# reached 2.71 nats/token but never copied from its context and looped in prose; adding repeat
# windows taught it to copy, but then ngram gained on prose as much as on the copy-heavy prompts and
# no learned drafter beat the baseline at C=1. Now: a deeper, narrower target (build.py), repeat
# windows, more editing pairs, and unlikelihood on prose once copying has emerged (from 60 % of the
# steps; earlier, it delays copying).
TARGET_STEPS = 4000
TARGET_LR = 1.5e-3
DRAFT_STEPS = 600
DRAFT_LR = 2e-3
UNROLL = 3  # speculative steps the heads are trained for (the profile's num_speculative_tokens)
STEP_WEIGHTS = (1.0, 0.8, 0.6)
EAGLE_REGRESSION = 1.0  # EAGLE-1 also regresses the target's next state (its output feeds the next step)
# Corpus mix (share of training windows).
MIX = {"code": 0.35, "prose": 0.2, "structured": 0.15, "editing": 0.3}
# Windows of passages from these sources, each followed by itself verbatim, so that copying from
# the context pays off in training (--repeat-share; the other shares shrink in proportion).
REPEAT_SHARE = 0.15
REPEAT_SOURCES = ("code", "prose", "structured")
REPEAT_LEN = (8, 100)  # passage length range, tokens
# Token-level unlikelihood on prose windows: greedy prose from a tiny model loops, and a looping
# target lets ngram "win" on prose for the wrong reason.
UNLIKELIHOOD = 1.0
UNLIKELIHOOD_SOURCES = ("prose",)
UNLIKELIHOOD_FROM = 0.6  # share of the target's steps before it starts
PERTURB_AGREEMENT = 0.80  # target_perturbed's greedy agreement with the target (teacher-forced)
EVAL_MAX_TOKENS = 48  # the profile's max_tokens
MIN_FUNC_LINES, MAX_FUNC_LINES = 4, 40


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def recent_mean(values: list[float], n: int = 50) -> float:
    """Mean of the last n values: the loss the logs and training.json report (one step is noisy)."""
    return sum(values[-n:]) / len(values[-n:])


# --------------------------------------------------------------------------------------------------
# Corpus


def _stdlib_files() -> list[Path]:
    return [p for p in build.training_text_files() if p.name != "topics.py"]


def code_docs() -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in _stdlib_files()]


def prose_docs() -> list[str]:
    """The interpreter's own documentation: pydoc's topic pages and the long docstrings of the stdlib."""
    import pydoc_data.topics

    docs = [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 300:
                    docs.append(doc)
    return docs


def _tables() -> list[tuple[str, list[str], list[list]]]:
    """(name, columns, rows) of tables the standard library carries."""
    import calendar
    import encodings.aliases
    import errno
    import html.entities
    import http
    import keyword
    import locale
    import mimetypes
    import os
    import unicodedata

    tables = [
        ("http_status", ["code", "phrase", "description"], [[s.value, s.phrase, s.description] for s in http.HTTPStatus]),
        ("mime_types", ["extension", "type"], sorted([k, v] for k, v in mimetypes.types_map.items())),
        ("encodings", ["alias", "codec"], sorted([k, v] for k, v in encodings.aliases.aliases.items())),
        ("errno", ["code", "name", "message"], [[c, n, os.strerror(c)] for c, n in sorted(errno.errorcode.items())]),
        ("entities", ["name", "codepoint", "char"], sorted([k, f"U+{v:04X}", chr(v)] for k, v in html.entities.name2codepoint.items())),
        ("locales", ["alias", "locale"], sorted([k, v] for k, v in locale.locale_alias.items())[:600]),
        ("months", ["number", "name", "abbr"], [[i, calendar.month_name[i], calendar.month_abbr[i]] for i in range(1, 13)]),
        ("weekdays", ["number", "name", "abbr"], [[i, calendar.day_name[i], calendar.day_abbr[i]] for i in range(7)]),
        ("keywords", ["keyword", "length"], [[k, len(k)] for k in keyword.kwlist]),
    ]
    chars = []
    for start in (0x20, 0xA0, 0x370, 0x400, 0x2190, 0x2200):
        for cp in range(start, start + 96):
            name = unicodedata.name(chr(cp), "")
            if name:
                chars.append([chr(cp), f"U+{cp:04X}", name, unicodedata.category(chr(cp))])
    tables.append(("unicode", ["char", "codepoint", "name", "category"], chars))
    return tables


def structured_docs(rng: random.Random) -> list[str]:
    """Each table in several formats: JSON list of records, JSON mapping, JSON lines, CSV, INI."""
    import csv
    import io

    docs = []
    for name, cols, rows in _tables():
        for _ in range(6):
            start = rng.randrange(max(1, len(rows) - 20))
            part = rows[start : start + rng.randint(12, 60)]
            kind = rng.choice(["json_records", "json_records", "json_map", "jsonl", "csv", "csv", "ini"])
            indent = rng.choice([2, 4])
            if kind == "json_records":
                if rng.random() < 0.5:
                    docs.append(json.dumps([dict(zip(cols, r)) for r in part], indent=indent, ensure_ascii=False))
                else:
                    lines = [" " * indent + json.dumps(dict(zip(cols, r)), ensure_ascii=False) for r in part]
                    docs.append("[\n" + ",\n".join(lines) + "\n]")
            elif kind == "json_map":
                docs.append(json.dumps({str(r[0]): r[1] for r in part}, indent=indent, ensure_ascii=False))
            elif kind == "jsonl":
                docs.append("\n".join(json.dumps(dict(zip(cols, r)), ensure_ascii=False) for r in part))
            elif kind == "csv":
                buf = io.StringIO()
                writer = csv.writer(buf, lineterminator="\n")
                writer.writerow(cols)
                writer.writerows(part)
                docs.append(buf.getvalue())
            else:
                docs.append("\n".join(f"[{name}:{r[0]}]\n" + "\n".join(f"{c} = {v}" for c, v in zip(cols[1:], r[1:])) + "\n" for r in part))
    return docs


def _defs(source: str):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.col_offset == 0:
            n = node.end_lineno - node.lineno + 1
            if MIN_FUNC_LINES <= n <= MAX_FUNC_LINES and not node.decorator_list:
                yield node, "\n".join(lines[node.lineno - 1 : node.end_lineno])


def editing_docs(rng: random.Random) -> list[str]:
    """'<code>\\n\\n# Same function, with the variable `a` renamed to `b`:\\n<renamed code>' pairs."""
    import re

    vocabulary = sorted({w for p in _stdlib_files()[:200] for w in re.findall(r"\b[a-z][a-z_]{2,14}\b", p.read_text(encoding="utf-8", errors="replace"))})
    docs = []
    for path in _stdlib_files():
        for node, code in _defs(path.read_text(encoding="utf-8", errors="replace")):
            if rng.random() > 0.35:
                continue
            names = {}
            for sub in ast.walk(node):
                if isinstance(sub, ast.arg) and sub.arg not in ("self", "cls"):
                    names.setdefault(sub.arg, "parameter")
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.setdefault(sub.id, "variable")
                elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and isinstance(node, ast.ClassDef):
                    names.setdefault(sub.attr, "attribute")
            if not names:
                kind, old = ("function" if isinstance(node, ast.FunctionDef) else "class"), node.name
                what = f"with `{old}` renamed to"
            else:
                old = rng.choice(sorted(names))
                kind = "function" if isinstance(node, ast.FunctionDef) else "class"
                what = f"with the {names[old]} `{old}` renamed to"
            new = rng.choice(vocabulary)
            if new == old or re.search(rf"\b{re.escape(new)}\b", code):
                continue
            renamed = re.sub(rf"(?<![\w.]){re.escape(old)}\b" if names.get(old) != "attribute" else rf"\b{re.escape(old)}\b", new, code)
            docs.append(f"{code}\n\n# Same {kind}, {what} `{new}`:\n{renamed}\n")
    return docs


class Corpus:
    """Token streams per source; windows are drawn with a seeded generator, sources by `mix`."""

    def __init__(self, tokenizer, seed: int, mix: dict[str, float] = MIX):
        import torch

        rng = random.Random(seed)
        texts = {"code": code_docs(), "prose": prose_docs(), "structured": structured_docs(rng), "editing": editing_docs(rng)}
        self.streams = {}
        for name, docs in texts.items():
            ids = []
            for enc in tokenizer(docs, add_special_tokens=False)["input_ids"]:
                ids.append(tokenizer.bos_token_id)
                ids.extend(enc)
            self.streams[name] = torch.tensor(ids, dtype=torch.long)
        self.bos = tokenizer.bos_token_id
        self.mix = mix
        self.names = sorted(mix)
        self.weights = torch.tensor([mix[n] for n in self.names])
        self.gen = torch.Generator().manual_seed(seed)

    def sizes(self) -> dict[str, int]:
        return {k: int(v.numel()) for k, v in self.streams.items()}

    def batch(self, batch: int = BATCH, seq: int = SEQ):
        return self.tagged_batch(batch, seq)[0]

    def tagged_batch(self, batch: int = BATCH, seq: int = SEQ):
        """(rows of seq + 1 tokens, the source each row was drawn from)."""
        import torch

        rows, names = [], []
        for src in torch.multinomial(self.weights, batch, replacement=True, generator=self.gen).tolist():
            name = self.names[src]
            names.append(name)
            rows.append(self._repeats(seq + 1) if name == "repeat" else self._window(self.streams[name], seq + 1))
        return torch.stack(rows), names

    def _window(self, stream, n: int, gen=None):
        import torch

        start = int(torch.randint(0, stream.numel() - n, (1,), generator=gen or self.gen))
        return stream[start : start + n]

    def _repeats(self, n: int):
        import torch

        parts, total = [], 0
        while total < n:
            stream = self.streams[REPEAT_SOURCES[int(torch.randint(0, len(REPEAT_SOURCES), (1,), generator=self.gen))]]
            passage = self._window(stream, int(torch.randint(REPEAT_LEN[0], REPEAT_LEN[1] + 1, (1,), generator=self.gen)))
            parts += [torch.tensor([self.bos]), passage, passage]
            total += 1 + 2 * passage.numel()
        return torch.cat(parts)[:n]

    def copy_probe(self, count: int = 32, length: int = 64):
        """`count` windows of (bos, passage, passage) from prose and code, with their own fixed seed."""
        import torch

        gen = torch.Generator().manual_seed(7)
        rows = []
        for i in range(count):
            passage = self._window(self.streams[("prose", "code")[i % 2]], length, gen)
            rows.append(torch.cat((torch.tensor([self.bos]), passage, passage)))
        return torch.stack(rows)


# --------------------------------------------------------------------------------------------------
# Training


def _schedule(step: int, total: int, warmup: int = 30) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _optimizer(params, lr):
    import torch

    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.05)


def _autocast():
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16)


def round_to_storage(module) -> None:
    """Round every parameter to float16, what the checkpoint stores (so evaluation sees the files)."""
    import torch

    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.float16).float())


def train_target(corpus: Corpus, steps: int, seed: int, lr: float = TARGET_LR):
    import torch
    import torch.nn.functional as F

    from specgate.zoo.modules import Llama

    torch.manual_seed(seed)
    model = Llama(build.TARGET, build.VOCAB_SIZE)
    build.init_weights(model)
    opt = _optimizer(model.parameters(), lr)
    probe = corpus.copy_probe()
    losses, ul_terms = [], []
    ul_from = int(UNLIKELIHOOD_FROM * steps)
    start = time.monotonic()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * _schedule(step, steps)
        batch, names = corpus.tagged_batch()
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with _autocast():
            logits = model(inputs)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss = ce
        rows = [i for i, name in enumerate(names) if name in UNLIKELIHOOD_SOURCES]
        if step >= ul_from and rows:
            ul = unlikelihood(logits[rows], inputs[rows], targets[rows]) * len(rows) / len(names)
            ul_terms.append(ul.item())
            loss = loss + UNLIKELIHOOD * ul
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(ce.item())
        if step % 50 == 0 or step == steps - 1:
            ul_note = f" unlikelihood {recent_mean(ul_terms):.3f}" if ul_terms else ""
            log(f"target step {step}/{steps} loss {recent_mean(losses):.3f}{ul_note} ({time.monotonic() - start:.0f} s)")
        if step % 250 == 0 or step == steps - 1:
            first, second = copy_losses(model, probe)
            log(f"target step {step}: copy probe, loss on a passage {first:.2f}, on its verbatim repeat {second:.2f}")
    round_to_storage(model)
    first, second = copy_losses(model, probe)
    stats = {
        "steps": steps,
        "lr": lr,
        "final_loss": recent_mean(losses),  # next-token cross-entropy alone
        "unlikelihood": dict(weight=UNLIKELIHOOD, sources=list(UNLIKELIHOOD_SOURCES), from_step=ul_from,
                             final=recent_mean(ul_terms) if ul_terms else None),
        "seconds": time.monotonic() - start,
    }
    count, length = probe.shape[0], (probe.shape[1] - 1) // 2
    return model, dict(stats, copy_probe={"passages": count, "tokens": length, "passage_loss": first, "repeat_loss": second})


def unlikelihood(logits, inputs, targets):
    """Token-level unlikelihood (Welleck et al. 2019, arXiv:1908.04319): -log(1 - p(c)) summed over the
    tokens c already in the context that are not the next token, averaged over positions. It takes
    probability away from repeating the context where the text does not repeat, the loops a small
    model falls into under greedy decoding; the next token itself is never penalised, so copying
    where the text does copy costs nothing."""
    import torch
    import torch.nn.functional as F

    seen = F.one_hot(inputs, logits.shape[-1]).cumsum(1) > 0  # token v occurs at or before position t
    seen.scatter_(2, targets[..., None], False)
    p = logits.float().softmax(-1)
    return -(torch.log((1 - p).clamp_min(1e-5)) * seen).sum(-1).mean()


def copy_losses(model, probe) -> tuple[float, float]:
    """Mean next-token loss on the first occurrence of each probe passage and on its repeat: a model
    that copies from its context scores far lower on the repeat."""
    import torch
    import torch.nn.functional as F

    half = (probe.shape[1] - 1) // 2
    with torch.no_grad():
        logits = model(probe[:, :-1])
    loss = F.cross_entropy(logits.float().transpose(1, 2), probe[:, 1:], reduction="none")
    return loss[:, : half - 1].mean().item(), loss[:, half + 1 :].mean().item()


def _soft_ce(logits, teacher_logp):
    """Cross-entropy against the teacher's distribution (KL up to a constant)."""
    import torch.nn.functional as F

    return -(teacher_logp.exp() * F.log_softmax(logits.float(), dim=-1)).sum(-1).mean()


def _unroll(head_step, embeds, first_states, positions, steps: int):
    """Run a chained head `steps` times in sequence form. Step 1 reads (x_{i+1}, first_states_i) at
    position i; step j reads (x_{i+1}, step j-1's output at i-1): what vLLM feeds it when the
    previous drafts were right. Returns [(out, logits)] per step, all aligned to predict x_{i+2}."""
    import torch

    outs = []
    states = first_states
    for _ in range(steps):
        out, logits = head_step(embeds, states, positions)
        outs.append((out, logits))
        states = torch.cat((first_states[:, :1], out[:, :-1]), dim=1)
    return outs


class Students:
    """Every drafter and its optimizer; `loss(batch)` returns each one's loss on one target forward."""

    def __init__(self, target, seed: int):
        import torch

        from specgate.zoo.modules import EagleHead, Eagle3Head, Llama, MedusaHeads, MtpLayer

        self.target = target
        for p in target.parameters():
            p.requires_grad_(False)
        torch.manual_seed(seed)
        h = build.TARGET["hidden_size"]
        self.models = {
            "draft": Llama(build.DRAFT, build.VOCAB_SIZE),
            "eagle": EagleHead(dict(build.TARGET, num_hidden_layers=1)),
            "eagle3": Eagle3Head(dict(build.TARGET, num_hidden_layers=1), build.VOCAB_SIZE, len(build.EAGLE3_AUX_LAYERS)),
            "medusa": MedusaHeads(h, build.VOCAB_SIZE, build.MEDUSA_HEADS),
            "mtp": MtpLayer(build.TARGET),
        }
        for model in self.models.values():
            build.init_weights(model)
        with torch.no_grad():  # heads with their own LM head start from the target's
            self.models["eagle3"].lm_head.weight.copy_(target.lm_head.weight)
            self.models["medusa"].lm_heads[0].weight.copy_(target.lm_head.weight)
            for block in self.models["medusa"].blocks:
                block.layers[0].weight.zero_()  # identity start: head k = "the target's next token"
        self.opts = {k: _optimizer(m.parameters(), DRAFT_LR) for k, m in self.models.items()}

    def forward(self, ids):
        """Per model: list of (logits, teacher position offset) and extra loss terms."""
        import torch
        import torch.nn.functional as F

        t = self.target
        with torch.no_grad():
            states, aux = t.hidden(ids, build.EAGLE3_AUX_LAYERS)
            teacher = F.log_softmax(t.lm_head(states).float(), dim=-1)
            embeds = t.model.embed_tokens(ids)
        n = ids.shape[1]
        pos = torch.arange(n - 1)
        nxt_embeds, cur_states = embeds[:, 1:], states[:, :-1]  # (x_{i+1}, h_i) for i < n-1
        tgt = teacher[:, 1:]  # predicts x_{i+2}
        losses = {}
        # draft model: plain distillation
        losses["draft"] = _soft_ce(self.models["draft"](ids), teacher)
        # EAGLE-1: lm_head(out) unnormed + regression of the next state
        eagle = self.models["eagle"]

        def eagle_step(e, s, p):
            out = eagle(e, s, p)
            return out, t.lm_head(out)

        loss = 0.0
        for w, (out, logits) in zip(STEP_WEIGHTS, _unroll(eagle_step, nxt_embeds, cur_states, pos, UNROLL)):
            loss = loss + w * (_soft_ce(logits, tgt) + EAGLE_REGRESSION * F.smooth_l1_loss(out.float(), states[:, 1:].float()))
        losses["eagle"] = loss
        # EAGLE-3: first state = fc(aux states)
        e3 = self.models["eagle3"]
        first = e3.fc(torch.cat([a[:, :-1] for a in aux], dim=-1))
        losses["eagle3"] = sum(w * _soft_ce(lg, tgt) for w, (_, lg) in zip(STEP_WEIGHTS, _unroll(e3, nxt_embeds, first, pos, UNROLL)))
        # Medusa: head k on h_i predicts x_{i+2+k}
        med = self.models["medusa"](states)
        losses["medusa"] = sum(_soft_ce(lg[:, : n - 1 - k], teacher[:, 1 + k :]) for k, lg in enumerate(med))
        # MTP: one step, target lm_head on its normed output
        losses["mtp"] = _soft_ce(t.lm_head(self.models["mtp"](nxt_embeds, cur_states, pos)), tgt)
        return losses

    def train(self, corpus: Corpus, steps: int):
        import torch

        start = time.monotonic()
        history = {k: [] for k in self.models}
        for step in range(steps):
            for opt in self.opts.values():
                for g in opt.param_groups:
                    g["lr"] = DRAFT_LR * _schedule(step, steps)
            batch = corpus.batch()[:, :-1]
            with _autocast():
                losses = self.forward(batch)
            for name, loss in losses.items():
                self.opts[name].zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            for name, model in self.models.items():
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                self.opts[name].step()
                history[name].append(losses[name].item())
            if step % 50 == 0 or step == steps - 1:
                avg = {k: recent_mean(v) for k, v in history.items()}
                log(f"drafters step {step}/{steps} " + " ".join(f"{k} {v:.3f}" for k, v in avg.items()) + f" ({time.monotonic() - start:.0f} s)")
        for model in self.models.values():
            round_to_storage(model)
        return {k: recent_mean(v) for k, v in history.items()}, time.monotonic() - start


# --------------------------------------------------------------------------------------------------
# Offline evaluation on the embedded prompts (teacher-forced against the target's greedy output)


def load_eval_prompts(tokenizer, root: Path):
    rows = [json.loads(line) for line in (root / EVAL_PROMPTS).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["category"], [tokenizer.bos_token_id, *tokenizer.encode(r["text"], add_special_tokens=False)]) for r in rows]


def greedy_continuations(target, prompts, max_tokens: int = EVAL_MAX_TOKENS):
    """Float32 greedy continuation of every prompt (right-padded batch, no cache)."""
    import torch

    n = max(len(p) for _, p in prompts) + max_tokens
    ids = torch.zeros(len(prompts), n, dtype=torch.long)
    lens = torch.tensor([len(p) for _, p in prompts])
    for i, (_, p) in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    rows = torch.arange(len(prompts))
    with torch.no_grad():
        for _ in range(max_tokens):
            width = int(lens.max())
            logits = target(ids[:, :width])
            nxt = logits[rows, lens - 1].argmax(-1)
            ids[rows, lens] = nxt
            lens = lens + 1
    return [(cat, ids[i, : int(lens[i])], len(p)) for i, (cat, p) in enumerate(prompts)]


def _chain_length(correct, k: int = UNROLL) -> float:
    """Mean tokens per verification step when step j's draft at anchor t is right iff correct[j][t]."""
    import torch

    n = min(c.numel() for c in correct[:k])
    ok = torch.stack([c[:n] for c in correct[:k]])  # (k, anchors)
    run = torch.cumprod(ok.long(), dim=0).sum(0)
    return 1.0 + run.float().mean().item()


def offline_acceptance(target, students: dict, perturbed, sequences) -> dict:
    """Estimated mean acceptance length at k=3 per (drafter, category), and the perturbed target's
    greedy agreement, over the continuation part of each sequence."""
    import torch

    per = {}
    with torch.no_grad():
        for cat, seq, plen in sequences:
            ids = seq[None]
            n = ids.shape[1]
            states, aux = target.hidden(ids, build.EAGLE3_AUX_LAYERS)
            embeds = target.model.embed_tokens(ids)
            x = seq
            pos = torch.arange(n - 1)
            nxt, cur = embeds[:, 1:], states[:, :-1]
            # anchors t: the drafts after x_{t+1}, where x_{t+1} is already a generated token
            anchors = slice(plen - 1, n - 2)
            res = {}

            def chain(step_preds):
                # step j (0-based) at anchor t lives at index t + j and predicts x_{t+j+2}
                correct = []
                for j, pred in enumerate(step_preds):
                    idx = torch.arange(plen - 1 + j, n - 2)
                    correct.append(pred[idx] == x[idx + 2])
                return _chain_length(correct)

            draft_pred = students["draft"](ids)[0].argmax(-1)  # at position p predicts x_{p+1}
            res["draft_model"] = chain([draft_pred[1:]] * UNROLL)
            eagle = students["eagle"]

            def eagle_step(e, s, p):
                out = eagle(e, s, p)
                return out, target.lm_head(out)

            outs = _unroll(eagle_step, nxt, cur, pos, UNROLL)
            res["eagle"] = chain([lg[0].argmax(-1) for _, lg in outs])
            e3 = students["eagle3"]
            outs = _unroll(e3, nxt, e3.fc(torch.cat([a[:, :-1] for a in aux], dim=-1)), pos, UNROLL)
            res["eagle3"] = chain([lg[0].argmax(-1) for _, lg in outs])
            med = [lg[0].argmax(-1) for lg in students["medusa"](states)]  # head k at t predicts x_{t+2+k}
            correct = []
            for k, pred in enumerate(med):
                idx = torch.arange(plen - 1, n - 2 - k)
                correct.append(pred[idx] == x[idx + 2 + k])
            res["medusa"] = _chain_length(correct)
            mtp = target.lm_head(students["mtp"](nxt, cur, pos))[0].argmax(-1)
            idx = torch.arange(plen - 1, n - 2)
            res["mtp"] = 1.0 + (mtp[idx] == x[idx + 2]).float().mean().item()
            if perturbed is not None:
                idx = torch.arange(plen - 1, n - 1)
                res["perturbed_agreement"] = (perturbed(ids)[0].argmax(-1)[idx] == x[idx + 1]).float().mean().item()
            for k, v in res.items():
                per.setdefault(k, {}).setdefault(cat, []).append(v)
    return {k: {c: sum(v) / len(v) for c, v in cats.items()} for k, cats in per.items()}


def perturb_for_agreement(target, sequences, want: float, seed: int):
    """The trained target plus seeded relative noise, its scale bisected to `want` greedy agreement."""
    import copy

    import torch

    def agreement(model):
        agree = total = 0
        with torch.no_grad():
            for _, seq, plen in sequences:
                pred = model(seq[None])[0].argmax(-1)
                idx = torch.arange(plen - 1, seq.numel() - 1)
                agree += (pred[idx] == seq[idx + 1]).sum().item()
                total += idx.numel()
        return agree / total

    gen = torch.Generator().manual_seed(seed)
    noise = {n: torch.randn(p.shape, generator=gen) * p.std() for n, p in target.named_parameters() if p.ndim == 2}
    lo, hi = 0.0, 0.2
    best = None
    for _ in range(8):
        scale = (lo + hi) / 2
        model = copy.deepcopy(target)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in noise:
                    p.add_(noise[n] * scale)
        round_to_storage(model)
        a = agreement(model)
        best = (scale, a, model)
        if abs(a - want) < 0.01:
            break
        lo, hi = (scale, hi) if a > want else (lo, scale)
    log(f"target_perturbed: relative noise {best[0]:.4f} -> greedy agreement {best[1]:.3f}")
    return best


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m specgate.zoo.train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=zoo_dir(Path.cwd()), help="zoo directory (default: fixtures/zoo)")
    parser.add_argument("--quick", action="store_true", help="a few steps only: checks the pipeline, not a usable zoo")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    parser.add_argument("--target-steps", type=int, default=TARGET_STEPS, help=f"target training steps (default: {TARGET_STEPS})")
    parser.add_argument("--target-lr", type=float, default=TARGET_LR, help=f"target peak learning rate (default: {TARGET_LR})")
    parser.add_argument("--repeat-share", type=float, default=REPEAT_SHARE, help=f"share of 'repeat' windows (default: {REPEAT_SHARE})")
    parser.add_argument("--draft-steps", type=int, default=DRAFT_STEPS, help=f"drafter training steps (default: {DRAFT_STEPS})")
    args = parser.parse_args(argv)
    if not 0 <= args.repeat_share < 1:
        parser.error("--repeat-share must be in [0, 1)")
    if args.quick and args.out.resolve() == zoo_dir(Path.cwd()).resolve():
        parser.error("--quick makes an unusable zoo; give it another --out than the committed fixtures/zoo")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    root = Path.cwd()
    target_steps, draft_steps = (20, 20) if args.quick else (args.target_steps, args.draft_steps)
    start = time.monotonic()

    tmp = args.out.with_name(args.out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log("tokenizer")
    tokenizer = build.build_tokenizer(tmp / "target")
    log("corpus")
    mix = {k: v * (1 - args.repeat_share) for k, v in MIX.items()}
    if args.repeat_share:
        mix["repeat"] = args.repeat_share
    corpus = Corpus(tokenizer, SEED, mix)
    log(f"corpus tokens: {corpus.sizes()}")

    target, target_stats = train_target(corpus, target_steps, SEED + 1, args.target_lr)
    students = Students(target, SEED + 2)
    draft_losses, draft_s = students.train(corpus, draft_steps)
    for m in students.models.values():
        m.eval()
    log("greedy continuations of the embedded prompts")
    sequences = greedy_continuations(target, load_eval_prompts(tokenizer, root))
    log("tuning target_perturbed")
    scale, agreement, perturbed = perturb_for_agreement(target, sequences, PERTURB_AGREEMENT, SEED + 3)
    log("offline acceptance")
    offline = offline_acceptance(target, students.models, perturbed, sequences)

    build.write_llama(tmp / "target", build.TARGET, tokenizer, target.state_dict())
    build.write_llama(tmp / "target_perturbed", build.TARGET, tokenizer, perturbed.state_dict())
    build.write_llama(tmp / "draft", build.DRAFT, tokenizer, students.models["draft"].state_dict())
    build.write_eagle(tmp / "eagle", tokenizer, students.models["eagle"].state_dict())
    build.write_eagle3(tmp / "eagle3", tokenizer, students.models["eagle3"].state_dict())
    build.write_medusa(tmp / "medusa", students.models["medusa"].state_dict())
    build.write_mlp_speculator(tmp / "mlp_speculator", build.random_mlp_speculator(build.SEED + 5))
    build.write_mtp_target(tmp / "mtp_target", tokenizer, students.models["mtp"].state_dict())

    samples = {}
    for cat, seq, plen in sequences:
        samples.setdefault(cat, tokenizer.decode(seq[plen:].tolist()))
    stats = dict(
        corpus=corpus.sizes(),
        mix=corpus.mix,
        repeat_len=REPEAT_LEN,
        seq=SEQ,
        batch=BATCH,
        unroll=UNROLL,
        target=target_stats,
        drafters=dict(steps=draft_steps, seconds=draft_s, final_loss=draft_losses),
        perturb=dict(scale=scale, agreement=agreement),
        offline=offline,
        samples=samples,
        prompts_sha256=prompts_digest(root),
        total_seconds=time.monotonic() - start,
        torch=torch.__version__,
        python=sys.version.split()[0],
    )
    (tmp / "training.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    build.install(tmp, args.out, list(ZOO_MODELS), extra=["training.json"])
    (args.out / "measured.json").unlink(missing_ok=True)  # measured on the previous weights
    write_card(args.out)
    log(f"zoo trained and written to {args.out} in {time.monotonic() - start:.0f} s")
    print(json.dumps({k: stats[k] for k in ("target", "drafters", "perturb", "offline")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
