"""The zoo's networks in plain PyTorch (torchvision does not import here): forward passes only.

Weights come from `perturbed_init`, so no two initializers are identical: the TorchScript
exporter would otherwise dedupe equal tensors (zero biases, unit LayerNorm gains) into
Identity nodes, which is not what deployed models look like.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F


def perturbed_init(module: nn.Module, seed: int) -> nn.Module:
    """Fixed-seed random weights with every tensor distinct; BatchNorm statistics made non-trivial."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / math.sqrt(fan_in)))
            elif name.endswith("weight"):  # norm gains: near 1, all different
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(1.0 + 0.2 * torch.rand(b.shape, generator=gen))
    return module.eval()


# ---- ResNet (v1.5: the stride sits on the 3×3 conv) ----

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.down = _downsample(cin, width, stride)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = _downsample(cin, cout, stride)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


def _downsample(cin: int, cout: int, stride: int):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, n in enumerate(layers):
            width = 64 * 2**i
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- BERT-style encoder (post-LN, erf GELU, additive attention mask) ----

class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in, self.ffn_out = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask_bias):
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        ctx = ctx.reshape(x.shape[0], x.shape[1], -1)
        x = self.ln1(x + self.attn_out(ctx))
        return self.ln2(x + self.ffn_out(F.gelu(self.ffn_in(x))))


class Encoder(nn.Module):
    """input_ids, attention_mask (int64 [batch, seq]) → last hidden state and pooled output."""

    def __init__(self, layers: int, hidden: int, heads: int, vocab: int = 30522, max_pos: int = 512):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, 4 * hidden) for _ in range(layers))
        self.pool = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.word(input_ids) + self.pos(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.ln(x)
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x, torch.tanh(self.pool(x[:, 0]))


# ---- small nets ----

class MLP(nn.Module):
    def __init__(self, width: int = 1024, depth: int = 4):
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])

    def forward(self, x):
        return self.layers(x)


class RNNTagger(nn.Module):
    """Token ids [batch, seq] → tag logits [batch, seq, tags] through a bidirectional LSTM or GRU."""

    def __init__(self, cell: type = nn.LSTM, vocab: int = 5000, embed: int = 128, hidden: int = 256, tags: int = 20):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = cell(embed, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens):
        y, _ = self.rnn(self.embed(tokens))
        return self.out(y)


class LoopThenBranch(nn.Module):
    """`steps` residual tanh layers (an ONNX Loop), then a data-dependent branch (an ONNX If).

    Meant for torch.jit.script, so the TorchScript exporter keeps the control flow.
    """

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x, steps: torch.Tensor):
        h = x
        for _ in range(int(steps)):
            h = torch.tanh(self.lin(h)) + 0.5 * h
        if bool(h.sum() > 0):
            out = h * 2.0 - 1.0
        else:
            out = torch.sigmoid(h)
        return out


class CondNet(nn.Module):
    """A data-dependent branch written with torch.cond: the dynamo exporter's way to an ONNX If."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: torch.relu(self.a(t)), lambda t: torch.tanh(self.b(t)), (x,))


class TinyFPN(nn.Module):
    """A small detector: strided backbone, top-down FPN (nearest and bilinear upsampling + Concat), heads."""

    def __init__(self, classes: int = 8, anchors: int = 3):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU())
        self.c3 = nn.Sequential(nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.Hardswish())
        self.c4 = nn.Sequential(nn.Conv2d(64, 128, 3, 2, 1), nn.BatchNorm2d(128), nn.Sigmoid())
        self.lat3 = nn.Conv2d(64, 64, 1)
        self.lat2 = nn.Conv2d(32, 32, 1)
        self.merge3 = nn.Conv2d(128 + 64, 64, 3, 1, 1)
        self.merge2 = nn.Conv2d(64 + 32, 32, 3, 1, 1)
        self.head3 = nn.Conv2d(64, anchors * (5 + classes), 1)
        self.head2 = nn.Conv2d(32, anchors * (5 + classes), 1)

    def forward(self, x):
        f2 = self.c2(self.c1(x))
        f3 = self.c3(f2)
        f4 = self.c4(f3)
        p3 = F.relu(self.merge3(torch.cat([F.interpolate(f4, scale_factor=2.0, mode="nearest"), self.lat3(f3)], 1)))
        up = F.interpolate(p3, scale_factor=2.0, mode="bilinear", align_corners=False)
        p2 = F.relu(self.merge2(torch.cat([up, self.lat2(f2)], 1)))
        return torch.sigmoid(self.head3(p3)), torch.sigmoid(self.head2(p2))


class SmallCNN(nn.Module):
    """A classifier small enough to quantize and calibrate in seconds."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.body(x), 1))


class BranchyCNN(nn.Module):
    """A small CNN whose static QOperator quantization uses every 8-bit op onnxruntime emits for
    vision nets: a residual Add, a two-branch Concat, sigmoid gating (Sigmoid, Mul), LeakyReLU,
    a padded AveragePool, a depthwise Conv, GlobalAveragePool and a MatMul head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.res = nn.Conv2d(16, 16, 3, 1, 1)
        self.left, self.right = nn.Conv2d(16, 8, 1), nn.Conv2d(16, 8, 3, 1, 1)
        self.gate = nn.Conv2d(16, 16, 1)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.widen = nn.Conv2d(16, 32, 3, 2, 1)
        self.head = nn.Parameter(torch.zeros(32, classes))

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = x + F.relu(self.res(x))
        x = torch.cat([self.left(x), self.right(x)], 1)
        x = x * torch.sigmoid(self.gate(x))
        x = self.pool(F.leaky_relu(x, 0.1))
        x = F.relu(self.widen(F.relu(self.depthwise(x))))
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1) @ self.head
