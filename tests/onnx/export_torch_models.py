"""The PyTorch models behind tests/onnx/data/*.onnx: a small CNN and a small causal transformer language model,
exported with torch.onnx.export (the TorchScript exporter: the dynamo one needs onnxscript). The test suite runs the
committed files (CI has no torch); `python tests/onnx/export_torch_models.py` writes them again, and the tests
export fresh copies at other opsets when torch is installed."""

from __future__ import annotations

import io
import math
import pathlib
import warnings

import torch
import torch.nn.functional as F  # noqa: N812

DATA = pathlib.Path(__file__).resolve().parent / "data"


class SmallCNN(torch.nn.Module):
    """Conv/BatchNorm/ReLU blocks, max and average pooling (ceil_mode, padding not counted), a grouped strided
    convolution, dropout, global pooling and a classifier: (N, 3, H, W) -> (N, 10) probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.conv3 = torch.nn.Conv2d(16, 16, 1)
        self.drop = torch.nn.Dropout(0.3)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = self.bn2(F.leaky_relu(self.conv2(x), 0.1))  # (after the activation: not folded into the conv)
        x = F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        x = F.hardswish(self.conv3(x))
        x = F.adaptive_avg_pool2d(self.drop(x), 1).flatten(1)
        return F.softmax(self.fc(x), dim=-1)


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.qkv, self.proj = heads, torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(c // self.heads)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        weights = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, c))


class TinyLM(torch.nn.Module):
    """Token and position embeddings, one pre-norm transformer block (causal attention, GELU MLP), tied-free output
    head: (B, T) int64 token ids -> (B, T, vocab) logits. The sequence length comes from the input's shape, so the
    export has Shape -> Gather -> Range/Concat -> Reshape chains."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4, context: int = 16) -> None:
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(context, dim)
        self.ln1, self.ln2, self.ln_f = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(approximate="tanh"),
                                       torch.nn.Linear(2 * dim, dim), torch.nn.GELU())  # fmt: skip
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln_f(x))


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    model = SmallCNN()
    for bn in (model.bn1, model.bn2):  # statistics that are not the identity, so BatchNormalization matters
        bn.running_mean = torch.empty(bn.num_features).uniform_(-0.5, 0.5)
        bn.running_var = torch.empty(bn.num_features).uniform_(0.5, 2.0)
    return model.eval()


def tiny_lm() -> torch.nn.Module:
    torch.manual_seed(0)
    return TinyLM().eval()


def export(model: torch.nn.Module, example: torch.Tensor, opset: int, input_name: str,
           dynamic: dict[int, str]) -> bytes:  # fmt: skip
    """The model as ONNX bytes (the legacy TorchScript exporter, which needs no onnxscript)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the exporter warns that it is the legacy one)
        torch.onnx.export(
            model,
            (example,),
            buffer,  # type: ignore[arg-type]  # (a file object works; the annotation says a path)
            dynamo=False,
            opset_version=opset,
            input_names=[input_name],
            output_names=["out"],
            dynamic_axes={input_name: dynamic, "out": {0: dynamic[0]}},
        )
    return buffer.getvalue()


def export_cnn(opset: int) -> bytes:
    return export(cnn(), torch.zeros(2, 3, 16, 16), opset, "image", {0: "batch"})


def export_tiny_lm(opset: int) -> bytes:
    return export(tiny_lm(), torch.zeros(2, 8, dtype=torch.int64), opset, "ids", {0: "batch", 1: "sequence"})


if __name__ == "__main__":
    DATA.mkdir(exist_ok=True)
    (DATA / "cnn_opset13.onnx").write_bytes(export_cnn(13))
    (DATA / "tiny_lm_opset17.onnx").write_bytes(export_tiny_lm(17))
    print(f"wrote {sorted(p.name for p in DATA.glob('*.onnx'))} to {DATA}")
