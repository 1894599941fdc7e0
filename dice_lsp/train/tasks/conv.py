"""Convolution tasks, 1D, 2D and 3D: standard, grouped, depthwise and pointwise (nn.ConvNd), transposed
(nn.ConvTransposeNd) and depthwise-separable (a depthwise then a pointwise nn.ConvNd), with stride, padding,
dilation and groups. ModelNew builds the same layers, so it holds the same weights, and hands them to its kernel.

Templates: one thread per output element walking its window (direct), the same gathered through the stride for a
transposed convolution, and the direct kernel launched twice for the separable pair.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.spatial import FILL, GEOMETRY, OUT_DIRECT, OUT_TRANSPOSED, SPATIAL_NAMES, UNRAVEL, \
    constants, spatial_shape
from dice_lsp.train.tasks.style import Style, sample_style, solution_file

_HEAD = """${includes}

${geometry_struct}
"""

# Both kernels' start: the output's sample, channel and group, and its bias.
_PROLOGUE = """__global__ void ${kernel}(const float*${ptr} x, const float*${ptr} w, const float*${ptr} bias, float*${ptr} y,
                          ${geometry} g, int cin, int cout, int groups, int64_t total) {
    const int cin_g = cin / groups, cout_g = cout / groups;
    const int64_t in_plane = (int64_t)g.in[0] * g.in[1] * g.in[2];
    const int volume = g.kernel[0] * g.kernel[1] * g.kernel[2];
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
${unravel}
        const int64_t n = plane / cout;
        const int co = (int)(plane % cout);
        const int group = co / cout_g;
        float acc = bias != nullptr ? bias[co] : 0.0f;
"""

_DIRECT = """
// ${what}: one thread per output element; input channels of the output's group times the window
""" + _PROLOGUE + """        for (int ci = 0; ci < cin_g; ++ci) {
            const float* in = x + (n * cin + group * cin_g + ci) * in_plane;
            const float* wk = w + ((int64_t)co * cin_g + ci) * volume;
            for (int kd = 0; kd < g.kernel[0]; ++kd) {
                const int id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
                if (id < 0 || id >= g.in[0]) continue;
                for (int kh = 0; kh < g.kernel[1]; ++kh) {
                    const int ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                    if (ih < 0 || ih >= g.in[1]) continue;
                    for (int kw = 0; kw < g.kernel[2]; ++kw) {
                        const int iw = ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
                        if (iw < 0 || iw >= g.in[2]) continue;
                        acc += in[((int64_t)id * g.in[1] + ih) * g.in[2] + iw] * wk[(kd * g.kernel[1] + kh) * g.kernel[2] + kw];
                    }
                }
            }
        }
        y[o] = acc;
    }
}
"""

_TRANSPOSED = """
// ${what}: one thread per output element gathers the inputs whose strided window covers it
""" + _PROLOGUE + """        for (int ci = 0; ci < cin_g; ++ci) {
            const int c = group * cin_g + ci;
            const float* in = x + (n * cin + c) * in_plane;
            // ConvTranspose weights are [cin, cout / groups, kernel...]
            const float* wk = w + ((int64_t)c * cout_g + co % cout_g) * volume;
            for (int kd = 0; kd < g.kernel[0]; ++kd) {
                const int td = od + g.pad[0] - kd * g.dilation[0];
                if (td < 0 || td % g.stride[0] != 0 || td / g.stride[0] >= g.in[0]) continue;
                for (int kh = 0; kh < g.kernel[1]; ++kh) {
                    const int th = oh + g.pad[1] - kh * g.dilation[1];
                    if (th < 0 || th % g.stride[1] != 0 || th / g.stride[1] >= g.in[1]) continue;
                    for (int kw = 0; kw < g.kernel[2]; ++kw) {
                        const int tw = ow + g.pad[2] - kw * g.dilation[2];
                        if (tw < 0 || tw % g.stride[2] != 0 || tw / g.stride[2] >= g.in[2]) continue;
                        const int64_t at = ((int64_t)(td / g.stride[0]) * g.in[1] + th / g.stride[1]) * g.in[2]
                                           + tw / g.stride[2];
                        acc += in[at] * wk[(kd * g.kernel[1] + kh) * g.kernel[2] + kw];
                    }
                }
            }
        }
        y[o] = acc;
    }
}
"""

_HOST = """
torch::Tensor ${host}(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, int64_t stride,
                      int64_t padding, int64_t dilation, int64_t groups${extra_param}) {
${inputs}
    const float* bias_ptr = nullptr;
    if (bias.has_value() && bias->defined()) {
        TORCH_CHECK(bias->is_cuda() && bias->is_contiguous(), "bias must be a contiguous CUDA tensor");
        bias_ptr = bias->data_ptr<float>();
    }
${fill}
    auto y = torch::empty(out_shape, x.options());
    const int64_t total = y.numel();
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, 65535);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias_ptr,
                                              y.data_ptr<float>(), g, (int)x.size(1), (int)out_shape[1],
                                              (int)groups, total);
${checked}
    return y;
}
"""

# The separable pair: the direct kernel over the depthwise weights, then again as a 1x1 over the result.
_SEPARABLE_HOST = """
torch::Tensor ${host}(torch::Tensor x, torch::Tensor depthwise, torch::Tensor pointwise,
                      c10::optional<torch::Tensor> bias, int64_t stride, int64_t padding, int64_t dilation) {
${inputs}
    const float* bias_ptr = bias.has_value() && bias->defined() ? bias->data_ptr<float>() : nullptr;
    torch::Tensor weight = depthwise;
    const int64_t groups = x.size(1);
${fill}
    auto mid = torch::empty(out_shape, x.options());
    ${geometry} g1 = g;
    for (int k = 0; k < 3; ++k) {
        g1.in[k] = g.out[k];
        g1.kernel[k] = 1;
        g1.stride[k] = 1;
        g1.pad[k] = 0;
        g1.dilation[k] = 1;
    }
    out_shape[1] = pointwise.size(0);
    auto y = torch::empty(out_shape, x.options());
    const int threads = ${block};
${stream}
    int64_t total = mid.numel();
    ${kernel}<<<(int)std::min<int64_t>((total + threads - 1) / threads, 65535), threads, 0, stream>>>(
        x.data_ptr<float>(), depthwise.data_ptr<float>(), nullptr, mid.data_ptr<float>(), g, (int)x.size(1),
        (int)x.size(1), (int)groups, total);
${checked}
    total = y.numel();
    ${kernel}<<<(int)std::min<int64_t>((total + threads - 1) / threads, 65535), threads, 0, stream>>>(
        mid.data_ptr<float>(), pointwise.data_ptr<float>(), bias_ptr, y.data_ptr<float>(), g1, (int)x.size(1),
        (int)out_shape[1], 1, total);
${checked_again}
    return y;
}
"""


def _draw(rng: random.Random, kind: str) -> dict:
    """Channels, kernel, stride, padding, dilation, groups and sizes whose multiply-adds stay under 2^29."""
    nd = rng.choice((1, 2, 3))
    cin = rng.choice((3, 8, 16, 32, 64))
    groups = {"depthwise": cin, "grouped": rng.choice([d for d in (2, 4, 8) if cin % d == 0] or [1])}.get(kind, 1)
    cout = cin if kind == "depthwise" else rng.choice((8, 16, 32, 64)) * (groups if kind == "grouped" else 1)
    kernel = 1 if kind == "pointwise" else rng.choice((3, 5) if nd < 3 else (3,))
    stride = 1 if kind == "pointwise" else rng.choice((1, 1, 2))
    dilation = 1 if kind == "pointwise" else rng.choice((1, 1, 2))
    padding = 0 if kind == "pointwise" else rng.choice((0, (kernel - 1) * dilation // 2))
    batch = rng.choice((1, 2, 4, 8, 16))
    work = batch * cout * (cin // groups) * kernel ** nd
    spatial = spatial_shape(rng, nd, max(1 << 7, (1 << 29) // work))
    spatial = [max(s, dilation * (kernel - 1) + 1) for s in spatial]
    return dict(nd=nd, cin=cin, cout=cout, kernel=kernel, stride=stride, dilation=dilation, padding=padding,
                groups=groups, batch=batch, spatial=spatial, bias=rng.random() < 0.5)


def _settings(p: dict, kind: str, transposed: bool) -> list[tuple[str, int]]:
    """The layer's arguments, as the reference's init parameters (and module constants) name them."""
    names = [("in_channels", p["cin"])] + ([("out_channels", p["cout"])] if kind != "depthwise" else [])
    names += [("kernel_size", p["kernel"])] if kind != "pointwise" else []
    names += [("stride", p["stride"]), ("padding", p["padding"])]
    names += [("output_padding", p["output_padding"])] if transposed else []
    names += [("dilation", p["dilation"])] + ([("groups", p["groups"])] if kind == "grouped" else [])
    return names


def _layer(p: dict, kind: str, transposed: bool, settings: list[tuple[str, int]]) -> str:
    given = dict(settings)
    layer = f"nn.Conv{'Transpose' if transposed else ''}{p['nd']}d"
    out = "out_channels" if "out_channels" in given else "in_channels"
    kernel = "kernel_size" if "kernel_size" in given else "1"
    extra = [f"{name}={name}" for name in ("stride", "padding", "output_padding", "dilation") if name in given]
    groups = "groups" if kind == "grouped" else "in_channels" if kind == "depthwise" else None
    extra += [f"groups={groups}"] if groups else []
    return f"{layer}(in_channels, {out}, {kernel}, {', '.join(extra)}, bias={p['bias']})"


def _conv_task(rng: random.Random, name: str) -> RenderedTask:
    transposed = name == "transposed"
    kind = "standard" if transposed else rng.choice(("standard", "grouped", "depthwise", "pointwise"))
    if name == "separable":
        kind = "separable"
    p = _draw(rng, "depthwise" if kind == "separable" else kind)
    p["output_padding"] = rng.choice((0, 1)) if transposed and p["stride"] > 1 else 0
    reference, layer = _conv_reference(rng, p, kind, transposed)
    stem = f"conv{'_transpose' if transposed else ''}{p['nd']}d" if kind != "separable" else f"sep_conv{p['nd']}d"
    solution = _conv_solution(sample_style(rng, stem), stem, p, kind, transposed, layer)
    shape_class = (f"{kind}-{p['nd']}d-k{p['kernel']}-s{p['stride']}-d{p['dilation']}"
                   f"-{'pad' if p['padding'] else 'valid'}{'-bias' if p['bias'] else ''}")
    return RenderedTask(reference, solution, shape_class)


@dataclass(frozen=True)
class _Layer:
    """The reference's convolution as ModelNew builds it again: its constructor's arguments and first lines, and
    the tensors the kernel is called with."""

    settings: list[tuple[str, int]]  # (constructor argument, value)
    init: str
    call: list[str]

    @property
    def init_params(self) -> str:
        return ", ".join(f"{n}: int" for n, _ in self.settings)


def _conv_reference(rng: random.Random, p: dict, kind: str, transposed: bool) -> tuple[str, _Layer]:
    names = ["batch_size", "in_channels"] + SPATIAL_NAMES[p["nd"]]
    if kind == "separable":
        settings = [("in_channels", p["cin"]), ("out_channels", rng.choice((16, 32, 64))),
                    ("kernel_size", p["kernel"]), ("stride", p["stride"]), ("padding", p["padding"]),
                    ("dilation", p["dilation"])]
        conv = f"nn.Conv{p['nd']}d"
        init = (f"self.depthwise = {conv}(in_channels, in_channels, kernel_size, stride=stride, padding=padding, "
                f"dilation=dilation, groups=in_channels, bias=False)\n"
                f"self.pointwise = {conv}(in_channels, out_channels, 1, bias={p['bias']})")
        body = "x = self.depthwise(x)\nreturn self.pointwise(x)" if rng.random() < 0.5 else \
            "return self.pointwise(self.depthwise(x))"
        call = ["self.depthwise.weight", "self.pointwise.weight", "self.pointwise.bias"]
        what = f"a depthwise-separable {p['nd']}D convolution"
    else:
        settings = _settings(p, kind, transposed)
        init = f"self.conv = {_layer(p, kind, transposed, settings)}"
        body = "return self.conv(x)"
        call = ["self.conv.weight", "self.conv.bias"]
        what = (f"a {'transposed' if transposed else kind} {p['nd']}D convolution"
                + (f" with stride {p['stride']}" if p["stride"] > 1 else ""))
    layer = _Layer(settings, init, call)
    reference = problem(
        init_params=layer.init_params, init_body=init, forward_params="x", forward_body=body,
        constants=constants(names + [n for n, _ in settings if n != "in_channels"],
                            [p["batch"], p["cin"]] + p["spatial"] + [v for n, v in settings if n != "in_channels"]),
        inputs=f"torch.randn({', '.join(names)})", init_inputs=", ".join(n for n, _ in settings),
        what=what, max_gb=0.5)
    return reference, layer


def _conv_solution(style: Style, stem: str, p: dict, kind: str, transposed: bool, layer: _Layer) -> str:
    geometry = "ConvGeometry" if style.naming % 2 else "conv_window"
    given = dict(layer.settings)
    fill = FILL.replace("${out_channels}", "weight.size(1) * groups" if transposed else "weight.size(0)")
    fill = fill.replace("${kernel_of}", "weight.size(s)").replace("${out_of}",
                                                                  OUT_TRANSPOSED if transposed else OUT_DIRECT)
    body_cuda = _HEAD + (_TRANSPOSED if transposed else _DIRECT) + (_SEPARABLE_HOST if kind == "separable" else _HOST)
    cuda = style.fill(body_cuda, includes=style.includes(), kernel=style.kernel(), what=stem.replace("_", " "),
                      geometry_struct=GEOMETRY.replace("${geometry}", geometry), geometry=geometry, unravel=UNRAVEL,
                      fill=fill.replace("${geometry}", geometry),
                      inputs=style.inputs(*(["x", "depthwise", "pointwise"] if kind == "separable" else ["x", "weight"])),
                      extra_param=", int64_t output_padding" if transposed else "",
                      checked_again=style.checked().replace("cudaError_t err", "err")
                      if style.launch_check == "cuda" else style.checked())
    if kind == "separable":
        declaration = (f"torch::Tensor {style.host}(torch::Tensor x, torch::Tensor depthwise, torch::Tensor pointwise, "
                       "c10::optional<torch::Tensor> bias, int64_t stride, int64_t padding, int64_t dilation);")
        scalars = ["self.stride", "self.padding", "self.dilation"]
    else:
        declaration = (f"torch::Tensor {style.host}(torch::Tensor x, torch::Tensor weight, "
                       "c10::optional<torch::Tensor> bias, int64_t stride, int64_t padding, int64_t dilation, "
                       f"int64_t groups{', int64_t output_padding' if transposed else ''});")
        groups = "self.groups" if kind == "grouped" else "self.in_channels" if kind == "depthwise" else "1"
        scalars = ["self.stride", "self.padding", "self.dilation", groups] + (["self.output_padding"]
                                                                              if transposed else [])
    kept = [n for n in ("stride", "padding", "dilation", "output_padding", "groups") if n in given]
    kept += ["in_channels"] if kind == "depthwise" else []
    mine = layer.init + "\n" + "\n".join(f"self.{n} = {n}" for n in kept)
    return solution_file(style, cuda=cuda, declaration=declaration, init_params=layer.init_params, init_body=mine,
                         forward_params="x", call_args=", ".join([style.arg("x")] + layer.call + scalars))


for _name in ("direct", "transposed", "separable"):
    template("conv", _name)(lambda rng, name=_name: _conv_task(rng, name))
