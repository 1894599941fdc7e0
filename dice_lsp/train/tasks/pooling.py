"""Pooling tasks: max pooling (with dilation) and average pooling over 1D, 2D or 3D windows with stride and
padding, as nn.MaxPoolNd / nn.AvgPoolNd or their functional forms.

Template: one thread per output element in a grid-stride loop, the window walked in place (padding never read).
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.spatial import FILL, GEOMETRY, OUT_DIRECT, SPATIAL_NAMES, UNRAVEL, constants, out_size, \
    spatial_shape
from dice_lsp.train.tasks.style import sample_style, solution_file

_POOL = """${includes}

${geometry_struct}

// ${what}: one thread per output element; positions in the padding are skipped
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, ${geometry} g, int64_t total) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
${unravel}
        const float* in = x + plane * g.in[0] * g.in[1] * g.in[2];
        float acc = ${init};
        for (int kd = 0; kd < g.kernel[0]; ++kd) {
            const int id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int kh = 0; kh < g.kernel[1]; ++kh) {
                const int ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                if (ih < 0 || ih >= g.in[1]) continue;
                for (int kw = 0; kw < g.kernel[2]; ++kw) {
                    const int iw = ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
                    if (iw < 0 || iw >= g.in[2]) continue;
                    const float v = in[((int64_t)id * g.in[1] + ih) * g.in[2] + iw];
                    acc = ${combine};
                }
            }
        }
        y[o] = ${final};
    }
}

torch::Tensor ${host}(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding, int64_t dilation) {
${inputs}
${fill}
    auto y = torch::empty(out_shape, x.options());
    const int64_t total = y.numel();
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, 65535);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), g, total);
${checked}
    return y;
}
"""

_OPS = {"max": ("-FLT_MAX", "fmaxf(acc, v)", "acc"),
        "avg": ("0.0f", "acc + v", "acc / (float)(g.kernel[0] * g.kernel[1] * g.kernel[2])")}


def _pool_task(rng: random.Random, kind: str) -> RenderedTask:
    nd = rng.choice((1, 2, 3))
    kernel = rng.choice((2, 3, 4) if nd == 3 else (2, 3, 4, 5))
    stride = rng.choice((1, 2, kernel))
    padding = rng.randrange(kernel // 2 + 1)
    dilation = rng.choice((1, 1, 2, 3)) if kind == "max" else 1
    channels = rng.choice((3, 16, 32, 64))
    batch = rng.choice((2, 4, 8, 16))
    spatial = spatial_shape(rng, nd, (1 << 21) // (channels * batch))
    if any(out_size(s, kernel, stride, padding, dilation) < 1 for s in spatial):
        spatial = [max(s, dilation * (kernel - 1) + 1) for s in spatial]
    names = ["batch_size", "channels"] + SPATIAL_NAMES[nd]
    layer = f"{'Max' if kind == 'max' else 'Avg'}Pool{nd}d"
    settings = ["kernel_size", "stride", "padding"] + (["dilation"] if kind == "max" else [])
    values = [kernel, stride, padding] + ([dilation] if kind == "max" else [])
    functional = rng.random() < 0.4
    if functional:
        init = "\n".join(f"self.{s} = {s}" for s in settings)
        args = ", ".join(f"{s}=self.{s}" for s in settings)
        body = f"return F.{layer[:-2].lower().replace('pool', '_pool')}{nd}d(x, {args})"
    else:
        init = f"self.pool = nn.{layer}(" + ", ".join(f"{s}={s}" for s in settings) + ")"
        body = "return self.pool(x)"
    init_params = ", ".join(f"{s}: int" for s in settings)
    reference = problem(
        init_params=init_params, init_body=init, forward_params="x", forward_body=body,
        constants=constants(names + settings, [batch, channels] + spatial + values),
        inputs=f"torch.randn({', '.join(names)})", init_inputs=", ".join(settings), functional=functional,
        what=f"{'max' if kind == 'max' else 'average'} pooling over a {nd}D window")
    stem = f"{kind}_pool{nd}d"
    style = sample_style(rng, stem)
    init_op, combine, final = _OPS[kind]
    fill = (FILL.replace("${out_channels}", "x.size(1)").replace("${kernel_of}", "kernel_size")
            .replace("${out_of}", OUT_DIRECT))
    geometry = "PoolGeometry" if style.naming % 2 else "window_t"
    cuda = style.fill(_POOL, includes=style.includes("cfloat"), kernel=style.kernel(), what=stem.replace("_", " "),
                      geometry_struct=GEOMETRY.replace("${geometry}", geometry), geometry=geometry,
                      unravel=UNRAVEL, init=init_op, combine=combine, final=final, inputs=style.inputs("x"),
                      fill=fill.replace("${geometry}", geometry))
    declaration = (f"torch::Tensor {style.host}(torch::Tensor x, int64_t kernel_size, int64_t stride, "
                   "int64_t padding, int64_t dilation);")
    mine = "\n".join(f"self.{s} = {s}" for s in settings)
    call = [style.arg("x")] + [f"self.{s}" for s in settings] + ([] if kind == "max" else ["1"])
    solution = solution_file(style, cuda=cuda, declaration=declaration, init_params=init_params, init_body=mine,
                             forward_params="x", call_args=", ".join(call))
    shape_class = f"{nd}d-k{kernel}-s{'k' if stride == kernel else stride}-p{padding}-d{dilation}"
    return RenderedTask(reference, solution, shape_class)


template("pooling", "max")(lambda rng: _pool_task(rng, "max"))
template("pooling", "avg")(lambda rng: _pool_task(rng, "avg"))
