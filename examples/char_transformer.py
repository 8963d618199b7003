"""A tiny character-level transformer trained on a fixed text that ships with the repo (`examples/data/corpus.txt`,
an earlier version of the README: a fixed text keeps the quality bar meaningful while the README changes).

    python examples/char_transformer.py [--device CPU] [--steps 300]

Prints the training loss in bits per character and a greedy sample (on an interactive terminal also a progress
line: step, loss, samples per second; `LAZY_PROGRESS`). Letter frequencies alone need about 4.9 bits
per character; after the default 300 steps the model is at about 1.8-2.0 (it starts to memorise the short text), and
the script fails unless it is below 2.5.
"""

from __future__ import annotations

import math
import pathlib
import time

import numpy as np
from training import classification_step, place, setup

from lazy import Tensor, nn
from lazy.nn.optim import AdamW
from lazy.progress import progress, write

TEXT = pathlib.Path(__file__).resolve().parent / "data" / "corpus.txt"


class Block:
    """Pre-norm transformer block: causal self-attention, then an MLP, each with a residual connection."""

    def __init__(self, dim: int, heads: int):
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x: Tensor, mask: Tensor) -> Tensor:  # (B, T, C) -> (B, T, C)
        b, t, c = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)  # 3x (B, H, T, D)
        scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(c // self.heads))  # (B, H, T, T)
        weights = mask.where(scores, -math.inf).softmax(-1)
        return self.proj((weights @ v).permute(0, 2, 1, 3).reshape(b, t, c))

    def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fc2(self.fc1(self.ln2(x)).gelu())


class CharTransformer:
    def __init__(self, vocab: int, context: int, dim: int = 64, heads: int = 4, layers: int = 2):
        self.context = context
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = [Block(dim, heads) for _ in range(layers)]
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def __call__(self, idx: Tensor) -> Tensor:  # (B, T) token ids -> (B, T, vocab) logits
        t = idx.shape[1]
        positions = Tensor.arange(t, device=idx.device).reshape(1, t)
        mask = Tensor.arange(t, device=idx.device).reshape(t, 1) >= Tensor.arange(t, device=idx.device).reshape(1, t)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def main() -> float:
    args, device = setup(__doc__, steps=300, context=32, batch=32)

    text = TEXT.read_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int32)
    model = CharTransformer(len(chars), args.context)
    opt = AdamW(place(model, device), lr=3e-3, weight_decay=0.01)
    step = classification_step(model, opt)

    rng = np.random.default_rng(0)
    print(f"training on {device}: {len(text)} characters of {TEXT.name}, vocabulary {len(chars)}")
    start, recent = time.perf_counter(), []
    with progress("training", total=args.steps * args.batch, unit="samples") as bar:
        for i in range(args.steps):
            offsets = rng.integers(0, len(data) - args.context - 1, args.batch)
            x = np.stack([data[o : o + args.context] for o in offsets])
            y = np.stack([data[o + 1 : o + args.context + 1] for o in offsets])
            bits = step(Tensor(x, device=device), Tensor(y, device=device)).item() / math.log(2)
            recent = (recent + [bits])[-20:]
            bar.update(args.batch, f"step {i + 1}/{args.steps}, loss {bits:.3f} bits/char")
            if i % 50 == 0 or i == args.steps - 1:
                write(f"step {i:4d}  loss {bits:.3f} bits/char  ({time.perf_counter() - start:.1f} s)")
    final = float(np.mean(recent))

    with Tensor.inference_mode():
        ids = [stoi[c] for c in "lazy "]
        for _ in range(60):
            # always a full-size window (padded at the end: causal attention never looks there): one kernel shape
            window = ids[-args.context :]
            padded = np.array([window + [0] * (args.context - len(window))], dtype=np.int32)
            logits = model(Tensor(padded, device=device))[0, len(window) - 1].numpy()
            ids.append(int(np.argmax(logits)))
    print("sample:", repr("".join(chars[i] for i in ids)))
    print(f"final loss (mean of the last 20 steps): {final:.3f} bits/char")
    if args.steps >= 300 and final >= 2.5:
        raise SystemExit(f"expected below 2.5 bits/char after {args.steps} steps, got {final:.3f}")
    return final


if __name__ == "__main__":
    main()
