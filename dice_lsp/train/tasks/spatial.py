"""What pooling and convolution tasks share: drawing an N, C, spatial shape (1D, 2D or 3D) and the window geometry
their kernels read, one struct of three dims where a 1D or 2D op has size 1 in the dims it lacks.
"""

from __future__ import annotations

import random

SPATIAL_NAMES = {1: ["length"], 2: ["height", "width"], 3: ["depth", "height", "width"]}

# The window of one output: input and output sizes, kernel, stride, padding, dilation, per dim (depth first).
GEOMETRY = """struct ${geometry} {
    int in[3];
    int out[3];
    int kernel[3];
    int stride[3];
    int pad[3];
    int dilation[3];
};"""

# Host lines filling `g` from x (N, C, spatial...) and the scalar settings; ${kernel_of} gives dim k's kernel size
# (a scalar, or a weight's size), ${out_of} the output size from the other fields.
FILL = """    ${geometry} g;
    const int nd = (int)x.dim() - 2;
    TORCH_CHECK(nd >= 1 && nd <= 3, "expected a 3D, 4D or 5D input");
    std::vector<int64_t> out_shape = {x.size(0), ${out_channels}};
    for (int k = 0; k < 3; ++k) {
        const bool real = k >= 3 - nd;
        const int s = k - (3 - nd) + 2;
        g.in[k] = real ? (int)x.size(s) : 1;
        g.kernel[k] = real ? (int)(${kernel_of}) : 1;
        g.stride[k] = real ? (int)stride : 1;
        g.pad[k] = real ? (int)padding : 0;
        g.dilation[k] = real ? (int)dilation : 1;
        g.out[k] = ${out_of};
        TORCH_CHECK(g.out[k] > 0, "the window does not fit the input");
        if (real) out_shape.push_back(g.out[k]);
    }"""

OUT_DIRECT = "(g.in[k] + 2 * g.pad[k] - g.dilation[k] * (g.kernel[k] - 1) - 1) / g.stride[k] + 1"
OUT_TRANSPOSED = ("(g.in[k] - 1) * g.stride[k] - 2 * g.pad[k] + g.dilation[k] * (g.kernel[k] - 1) + "
                  "(real ? (int)output_padding : 0) + 1")

# Device lines splitting the flat output index `o` into the plane (n * C + c) and the output coordinates.
UNRAVEL = """        const int ow = (int)(o % g.out[2]);
        const int oh = (int)((o / g.out[2]) % g.out[1]);
        const int od = (int)((o / ((int64_t)g.out[2] * g.out[1])) % g.out[0]);
        const int64_t plane = o / ((int64_t)g.out[2] * g.out[1] * g.out[0]);"""


def spatial_shape(rng: random.Random, nd: int, budget: int) -> list[int]:
    """Spatial sizes of `nd` dims whose product is at most `budget` (the smallest when none is); odd sizes too,
    so edges matter."""
    choices = {1: (127, 256, 1000, 4096, 8191), 2: (15, 32, 57, 64, 128, 224), 3: (8, 15, 16, 24, 32, 48)}[nd]
    for _ in range(100):
        shape = [rng.choice(choices) for _ in range(nd)]
        count = 1
        for dim in shape:
            count *= dim
        if count <= budget:
            return shape
    return [choices[0]] * nd


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def constants(names: list[str], values: list[int]) -> str:
    return "\n".join(f"{name} = {value}" for name, value in zip(names, values))
