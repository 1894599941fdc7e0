"""Normalisations over channels of [N, C, spatial...] tensors: batch norm (as run in eval mode: the running
statistics), instance norm and group norm (statistics of each sample's channel or group of channels).

Templates: one thread per element for the per-channel affine of batch norm, and one block per (sample, group)
row for instance and group norm (a two-sweep mean and variance, reduced in the block).
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.spatial import SPATIAL_NAMES, constants, spatial_shape
from dice_lsp.train.tasks.style import sample_style, solution_file

_BATCH = """${includes}

// batch norm in eval mode: each channel's running mean and variance, then its weight and bias
__global__ void ${kernel}(const float*${ptr} x, const float*${ptr} mean, const float*${ptr} var,
                          const float*${ptr} weight, const float*${ptr} bias, float*${ptr} y, int64_t total,
                          int channels, int64_t spatial, float eps) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)((i / spatial) % channels);
        y[i] = (x[i] - mean[c]) * rsqrtf(var[c] + eps) * weight[c] + bias[c];
    }
}

torch::Tensor ${host}(torch::Tensor x, torch::Tensor mean, torch::Tensor var, torch::Tensor weight,
                      torch::Tensor bias, double eps) {
${inputs}
    const int channels = (int)x.size(1);
    const int64_t spatial = x.numel() / (x.size(0) * channels);
    auto y = torch::empty_like(x);
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((x.numel() + threads - 1) / threads, 65535);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), mean.data_ptr<float>(), var.data_ptr<float>(),
                                              weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                                              x.numel(), channels, spatial, (float)eps);
${checked}
    return y;
}
"""

GROUP_NORM = """${includes}

// the block's sum; every thread gets it
__device__ float ${block_sum}(float v, float* scratch) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); ++w) v += scratch[w];
    __syncthreads();
    return v;
}

// ${what}: one block per (sample, group); the group's channels are one contiguous row of `length` elements
__global__ void ${kernel}(const float*${ptr} x, const float*${ptr} weight, const float*${ptr} bias, float*${ptr} y,
                          int groups, int channels_per_group, int64_t spatial, float eps) {
    __shared__ float scratch[32];
    const int64_t length = channels_per_group * spatial;
    const float* in = x + (int64_t)blockIdx.x * length;
    float* out = y + (int64_t)blockIdx.x * length;
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < length; j += blockDim.x) sum += in[j];
    const float mean = ${block_sum}(sum, scratch) / (float)length;
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < length; j += blockDim.x) sq += (in[j] - mean) * (in[j] - mean);
    const float rstd = rsqrtf(${block_sum}(sq, scratch) / (float)length + eps);
    const int first = (int)(blockIdx.x % groups) * channels_per_group;
    for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
        const int c = first + (int)(j / spatial);
        float v = (in[j] - mean) * rstd;
        if (weight != nullptr) v = v * weight[c] + bias[c];
        out[j] = v;
    }
}

torch::Tensor ${host}(torch::Tensor x, c10::optional<torch::Tensor> weight, c10::optional<torch::Tensor> bias,
                      int64_t groups, double eps) {
${inputs}
    const int64_t channels = x.size(1);
    TORCH_CHECK(channels % groups == 0, "channels must divide into groups");
    const int64_t spatial = x.numel() / (x.size(0) * channels);
    const bool affine = weight.has_value() && weight->defined();
    auto y = torch::empty_like(x);
${stream}
    ${kernel}<<<(unsigned)(x.size(0) * groups), ${block}, 0, stream>>>(x.data_ptr<float>(),
        affine ? weight->data_ptr<float>() : nullptr, affine ? bias->data_ptr<float>() : nullptr,
        y.data_ptr<float>(), (int)groups, (int)(channels / groups), spatial, (float)eps);
${checked}
    return y;
}
"""


def _shape(rng: random.Random, nd: int) -> tuple[int, int, list[int]]:
    batch, channels = rng.choice((2, 4, 8, 16)), rng.choice((8, 16, 32, 64))
    return batch, channels, spatial_shape(rng, nd, (1 << 22) // (batch * channels))


def _batch_task(rng: random.Random) -> RenderedTask:
    nd = rng.choice((0, 1, 2, 3))
    batch, channels, spatial = _shape(rng, max(nd, 1))
    spatial = spatial if nd else []
    names = ["batch_size", "num_features"] + (SPATIAL_NAMES[nd] if nd else [])
    layer = f"nn.BatchNorm{max(nd, 1)}d"
    eps = rng.choice((1e-5, 1e-3))
    init = f"self.bn = {layer}(num_features{f', eps={eps}' if eps != 1e-5 else ''})"
    reference = problem(init_params="num_features: int", init_body=init, forward_params="x",
                        forward_body="return self.bn(x)", constants=constants(names, [batch, channels] + spatial),
                        inputs=f"torch.randn({', '.join(names)})", init_inputs="num_features",
                        what=f"batch normalization over {channels} channels")
    style = sample_style(rng, "batch_norm")
    tensors = ("x", "mean", "var", "weight", "bias")
    cuda = style.fill(_BATCH, includes=style.includes(), kernel=style.kernel(), inputs=style.inputs(*tensors))
    signature = ", ".join(f"torch::Tensor {t}" for t in tensors) + ", double eps"
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}({signature});",
                             init_params="num_features: int", init_body=init, forward_params="x",
                             call_args=f"{style.arg('x')}, self.bn.running_mean, self.bn.running_var, self.bn.weight, "
                                       "self.bn.bias, self.bn.eps")
    return RenderedTask(reference, solution, f"batch-{nd}d")


def _group_task(rng: random.Random) -> RenderedTask:
    kind = rng.choice(("instance", "group"))
    nd = rng.choice((1, 2, 3)) if kind == "instance" else rng.choice((0, 1, 2))
    batch, channels, spatial = _shape(rng, max(nd, 1))
    spatial = spatial if nd else []
    eps = rng.choice((1e-5, 1e-6))
    spatial_names = SPATIAL_NAMES[nd] if nd else []
    if kind == "instance":
        affine = rng.random() < 0.4
        names = ["batch_size", "num_features"] + spatial_names
        init_params, init_inputs = "num_features: int", "num_features"
        init = f"self.norm = nn.InstanceNorm{nd}d(num_features, eps={eps}{', affine=True' if affine else ''})"
        groups = "self.norm.num_features"
        values = [batch, channels] + spatial
    else:
        affine = True
        num_groups = rng.choice([g for g in (2, 4, 8, 16) if channels % g == 0])
        names = ["batch_size", "num_channels"] + spatial_names + ["num_groups"]
        init_params, init_inputs = "num_groups: int, num_channels: int", "num_groups, num_channels"
        init = f"self.norm = nn.GroupNorm(num_groups, num_channels, eps={eps})"
        groups = "self.norm.num_groups"
        values = [batch, channels] + spatial + [num_groups]
    reference = problem(init_params=init_params, init_body=init, forward_params="x", forward_body="return self.norm(x)",
                        constants=constants(names, values),
                        inputs=f"torch.randn({', '.join(names[:2] + spatial_names)})", init_inputs=init_inputs,
                        what=f"{kind} normalization")
    style = sample_style(rng, f"{kind}_norm", (128, 256, 512))
    cuda = style.fill(GROUP_NORM, includes=style.includes(), kernel=style.kernel(), inputs=style.inputs("x"),
                      what=f"{kind} norm", block_sum="block_sum" if style.naming % 2 else "sum_block")
    declaration = (f"torch::Tensor {style.host}(torch::Tensor x, c10::optional<torch::Tensor> weight, "
                   "c10::optional<torch::Tensor> bias, int64_t groups, double eps);")
    solution = solution_file(style, cuda=cuda, declaration=declaration, init_params=init_params, init_body=init,
                             forward_params="x", call_args=f"{style.arg('x')}, self.norm.weight, self.norm.bias, "
                                                           f"{groups}, self.norm.eps")
    return RenderedTask(reference, solution, f"{kind}-{nd}d{'-affine' if affine else ''}")


template("norm", "batch_eval")(_batch_task)
template("norm", "group_rows")(_group_task)
