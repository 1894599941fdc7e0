"""Matmul variants read through strides: square, batched, A or B or both transposed, lower or upper triangular,
symmetric inputs, matrix-vector, tall-skinny, small or large K, irregular sizes, and 3D / 4D tensors times a
matrix; and a diagonal matrix times a matrix (a row scale).

Templates: one thread per output element (any batch and size), 16x16 or 32x32 shared-memory tiles (grid.z the
batch), and the row scale for diag(a) @ B.
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file

# Host lines shared by both kernels: M, K, N, the batch and each operand's strides from the shapes and flags.
_SHAPES = """    int64_t batch = 1, M, K, N, sab = 0, sam, sak, sbb = 0, sbk, sbn;
    std::vector<int64_t> out_shape;
    if (a.dim() == 3 && b.dim() == 3) {  // batched: [batch, M, K] @ [batch, K, N]
        batch = a.size(0);
        M = a.size(transpose_a ? 2 : 1);
        K = a.size(transpose_a ? 1 : 2);
        N = b.size(transpose_b ? 1 : 2);
        sab = a.size(1) * a.size(2);
        sbb = b.size(1) * b.size(2);
        sam = transpose_a ? 1 : a.size(2);
        sak = transpose_a ? a.size(2) : 1;
        out_shape = {batch, M, N};
    } else if (transpose_a) {  // a is [K, M]
        TORCH_CHECK(a.dim() == 2, "a transposed operand must be 2D");
        K = a.size(0);
        M = a.size(1);
        sam = 1;
        sak = M;
        out_shape = {M};
    } else {  // a is [..., M', K]: its leading dims fold into M
        K = a.size(-1);
        M = a.numel() / K;
        sam = K;
        sak = 1;
        out_shape = a.sizes().vec();
        out_shape.pop_back();
    }
    if (b.dim() == 3) {
        sbk = transpose_b ? 1 : b.size(2);
        sbn = transpose_b ? b.size(2) : 1;
    } else if (b.dim() == 1) {  // a vector: one output column, dropped from the shape
        N = 1;
        sbk = 1;
        sbn = 0;
    } else {
        N = b.size(transpose_b ? 0 : 1);
        sbk = transpose_b ? 1 : N;
        sbn = transpose_b ? K : 1;
        out_shape.push_back(N);
    }
    TORCH_CHECK(b.size(b.dim() == 1 ? 0 : (b.dim() == 3 ? (transpose_b ? 2 : 1) : (transpose_b ? 1 : 0))) == K,
                "inner dims must match");
    auto c = torch::empty(out_shape, a.options());"""

_NAIVE = """${includes}

// C[z, m, n] = sum_k A(z, m, k) * B(z, k, n), every operand read through its strides; one thread per output
__global__ void ${kernel}(const float*${ptr} A, const float*${ptr} B, float*${ptr} C, int64_t batch, int64_t M,
                          int64_t N, int64_t K, int64_t sab, int64_t sam, int64_t sak, int64_t sbb, int64_t sbk,
                          int64_t sbn, int triangle) {
    const int64_t total = batch * M * N;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int64_t col = o % N, row = (o / N) % M, z = o / (M * N);
        // a triangular product keeps one side of the diagonal (its inputs are triangular, so the rest is zero)
        if ((triangle == 1 && col > row) || (triangle == 2 && col < row)) {
            C[o] = 0.0f;
            continue;
        }
        const float* a = A + z * sab + row * sam;
        const float* b = B + z * sbb + col * sbn;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc += a[k * sak] * b[k * sbk];
        C[o] = acc;
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b, bool transpose_a, bool transpose_b, int64_t triangle) {
${inputs}
${shapes}
    const int64_t total = batch * M * N;
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, 65535);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), batch,
                                              M, N, K, sab, sam, sak, sbb, sbk, sbn, (int)triangle);
${checked}
    return c;
}
"""

_TILED = """${includes}

#define ${tile} ${tile_size}

// C = A @ B through ${tile_size}x${tile_size} tiles in shared memory, each operand read through its strides;
// grid.z walks the batch
__global__ void ${kernel}(const float*${ptr} A, const float*${ptr} B, float*${ptr} C, int64_t M, int64_t N,
                          int64_t K, int64_t sab, int64_t sam, int64_t sak, int64_t sbb, int64_t sbk, int64_t sbn,
                          int triangle) {
    __shared__ float a_tile[${tile}][${tile}];
    __shared__ float b_tile[${tile}][${tile} + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * ${tile} + ty;
    const int64_t col = (int64_t)blockIdx.x * ${tile} + tx;
    const float* a = A + blockIdx.z * sab;
    const float* b = B + blockIdx.z * sbb;
    float acc = 0.0f;
    for (int64_t t = 0; t < K; t += ${tile}) {
        // zero-fill past the edges so partial tiles add nothing
        a_tile[ty][tx] = (row < M && t + tx < K) ? a[row * sam + (t + tx) * sak] : 0.0f;
        b_tile[ty][tx] = (t + ty < K && col < N) ? b[(t + ty) * sbk + col * sbn] : 0.0f;
        __syncthreads();
        for (int j = 0; j < ${tile}; ++j) acc += a_tile[ty][j] * b_tile[j][tx];
        __syncthreads();
    }
    if (row < M && col < N) {
        if ((triangle == 1 && col > row) || (triangle == 2 && col < row)) acc = 0.0f;
        C[(int64_t)blockIdx.z * M * N + row * N + col] = acc;
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b, bool transpose_a, bool transpose_b, int64_t triangle) {
${inputs}
${shapes}
    TORCH_CHECK((M + ${tile} - 1) / ${tile} <= 65535 && batch <= 65535, "too many rows or batches for the grid");
    dim3 block(${tile}, ${tile});
    dim3 grid((unsigned)((N + ${tile} - 1) / ${tile}), (unsigned)((M + ${tile} - 1) / ${tile}), (unsigned)batch);
${stream}
    ${kernel}<<<grid, block, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K,
                                          sab, sam, sak, sbb, sbk, sbn, (int)triangle);
${checked}
    return c;
}
"""

_TEMPLATES = {"strided_naive": _NAIVE, "strided_tiled": _TILED}
VARIANTS = ("square", "batched", "transposed_a", "transposed_b", "transposed_both", "lower_triangular",
            "upper_triangular", "symmetric", "matvec", "tall_skinny", "small_k", "large_k", "irregular", "tensor3d",
            "tensor4d")


def _dims(rng: random.Random, variant: str) -> tuple[int, int, int]:
    """M, K, N of the variant, at most 2^28 multiply-adds."""
    pick = rng.choice
    m, k, n = pick((256, 512, 1024)), pick((256, 512, 1024)), pick((256, 512, 1024))
    if variant in ("square", "lower_triangular", "upper_triangular", "symmetric"):
        k = n = m
    elif variant == "matvec":
        m, k, n = pick((1024, 4096, 16384)), pick((1024, 4096, 8192)), 1
    elif variant == "tall_skinny":
        m, k, n = pick((16384, 32768, 65536)), pick((16, 32, 64)), pick((16, 32, 64))
    elif variant == "small_k":
        k = pick((8, 16, 32))
    elif variant == "large_k":
        m, n, k = pick((64, 128, 256)), pick((64, 128, 256)), pick((16384, 65536, 131072))
    elif variant == "irregular":
        m, k, n = pick((111, 513, 777, 1023)), pick((97, 333, 1001)), pick((65, 255, 901))
    while m * n * k > 1 << 28:
        m //= 2
    return m, k, n


def _reference(rng: random.Random, variant: str, m: int, k: int, n: int) -> tuple[str, str, str, tuple]:
    """(forward body, constants, inputs, the solution's (transpose_a, transpose_b, triangle))."""
    batch = rng.choice((4, 8, 16, 32))
    mm = rng.choice(("torch.matmul({a}, {b})", "{a} @ {b}"))
    plain = f"M = {m}\nK = {k}\nN = {n}"
    if variant == "batched":
        while batch * m * n * k > 1 << 28:
            batch //= 2
        return ("return torch.bmm(A, B)", f"batch_size = {batch}\n{plain}",
                "torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)", (False, False, 0))
    if variant.startswith("transposed"):
        ta, tb = variant != "transposed_b", variant != "transposed_a"
        a, b = ("A.T" if ta else "A"), ("B.T" if tb else "B")
        shapes = f"torch.randn({'K, M' if ta else 'M, K'}), torch.randn({'N, K' if tb else 'K, N'})"
        return f"return {mm.format(a=a, b=b)}", plain, shapes, (ta, tb, 0)
    if variant.endswith("triangular"):
        keep = "tril" if variant.startswith("lower") else "triu"
        return (f"return torch.{keep}({mm.format(a='A', b='B')})", f"N = {n}",
                f"torch.{keep}(torch.randn(N, N)), torch.{keep}(torch.randn(N, N))", (False, False,
                                                                                      1 if keep == "tril" else 2))
    if variant == "symmetric":
        return (f"return {mm.format(a='A', b='B')}", f"N = {n}",
                "torch.cov(torch.randn(N, 2 * N)), torch.cov(torch.randn(N, 2 * N))", (False, False, 0))
    if variant == "matvec":
        vector = rng.random() < 0.5
        return (f"return {mm.format(a='A', b='B')}", f"M = {m}\nK = {k}",
                f"torch.randn(M, K), torch.randn({'K' if vector else 'K, 1'})", (False, False, 0))
    if variant == "tensor3d":
        rows = max(1, m // batch)
        return (f"return {mm.format(a='A', b='B')}", f"batch_size = {batch}\nM = {rows}\nK = {k}\nN = {n}",
                "torch.randn(batch_size, M, K), torch.randn(K, N)", (False, False, 0))
    if variant == "tensor4d":
        i, j = rng.choice((4, 8, 16)), max(1, m // 64)
        return ("return torch.einsum(\"bijl,lk->bijk\", A, B)", f"b = {max(1, 64 // (i * 1))}\ni = {i}\nj = {j}\n"
                f"l = {k}\nk = {n}", "torch.randn(b, i, j, l), torch.randn(l, k)", (False, False, 0))
    if variant == "square":
        return f"return {mm.format(a='A', b='B')}", f"N = {n}", "torch.randn(N, N), torch.randn(N, N)", (False, False, 0)
    return f"return {mm.format(a='A', b='B')}", plain, "torch.randn(M, K), torch.randn(K, N)", (False, False, 0)


_GRID_ROWS = 65535 * 16  # the tiled kernel's grid.y times its smallest tile


def _rows_per_unit(variant: str, constants: str) -> int:
    """Rows of the folded M that one more unit of the grown (first) size adds."""
    values = dict(line.split(" = ") for line in constants.split("\n"))
    if variant == "batched":
        return 16  # grid.z is the batch: at most 65535
    if variant == "tensor3d":
        return int(values["M"])
    if variant == "tensor4d":
        return int(values["i"]) * int(values["j"])
    return 1


def _strided_task(rng: random.Random, name: str) -> RenderedTask:
    variant = rng.choice(VARIANTS)
    m, k, n = _dims(rng, variant)
    body, constants, inputs, (ta, tb, triangle) = _reference(rng, variant, m, k, n)
    reference = problem(init_params="", init_body="", forward_params="A, B", forward_body=body, constants=constants,
                        inputs=inputs, init_inputs="", what=f"a {variant.replace('_', ' ')} matrix multiplication",
                        renames=False, max_gb=1.0, limit=_GRID_ROWS // _rows_per_unit(variant, constants),
                        rand_ok=variant != "symmetric", grow=None if "N = " in constants.split("\n")[0] else "first")
    style = sample_style(rng, f"{variant}_matmul")
    cuda = style.fill(_TEMPLATES[name], includes=style.includes(), kernel=style.kernel(), inputs=style.inputs("a", "b"),
                      shapes=_SHAPES, tile="TILE" if style.naming % 2 else "TILE_DIM",
                      tile_size=rng.choice((16, 32)))
    declaration = (f"torch::Tensor {style.host}(torch::Tensor a, torch::Tensor b, bool transpose_a, bool transpose_b, "
                   "int64_t triangle);")
    solution = solution_file(style, cuda=cuda, declaration=declaration, init_params="", init_body="",
                             forward_params="A, B",
                             call_args=f"{style.arg('A')}, {style.arg('B')}, {ta}, {tb}, {triangle}")
    size = "small" if m * n * k < 1 << 24 else "large"
    return RenderedTask(reference, solution, f"{variant}-{size}")


_DIAG = """${includes}

// diag(a) @ B scales row i of B by a[i]: no matrix is built and nothing is summed
__global__ void ${kernel}(const float*${ptr} a, const float*${ptr} b, float*${ptr} c, int64_t rows, int64_t cols) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += (int64_t)gridDim.x * blockDim.x) {
        c[i] = a[i / cols] * b[i];
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b) {
${inputs}
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0), "a must be [N] and b [N, M]");
    auto c = torch::empty_like(b);
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((b.numel() + threads - 1) / threads, 65535);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                                              b.size(0), b.size(1));
${checked}
    return c;
}
"""


def _diag_task(rng: random.Random) -> RenderedTask:
    n, m = rng.choice((256, 1000, 4096)), rng.choice((256, 1024, 4095))
    body = rng.choice(("return torch.diag(A) @ B", "return torch.matmul(torch.diag(A), B)"))
    reference = problem(init_params="", init_body="", forward_params="A, B", forward_body=body,
                        constants=f"N = {n}\nM = {m}", inputs="torch.randn(N), torch.randn(N, M)", init_inputs="",
                        what="a diagonal matrix times a matrix", renames=False, grow=None)
    style = sample_style(rng, "diag_matmul")
    cuda = style.fill(_DIAG, includes=style.includes(), kernel=style.kernel(), inputs=style.inputs("a", "b"))
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor a, torch::Tensor b);",
                             init_params="", init_body="", forward_params="A, B",
                             call_args=f"{style.arg('A')}, {style.arg('B')}")
    return RenderedTask(reference, solution, f"diag-{'large' if n * m > 1 << 22 else 'small'}")


for _name in _TEMPLATES:
    template("matmul", _name)(lambda rng, name=_name: _strided_task(rng, name))
template("matmul", "diag_scale")(_diag_task)
