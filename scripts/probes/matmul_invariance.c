// Does a row of a quantized matmul depend on the rows that share its batch? For each weight type
// the models use, one matmul over 16 rows of activations, then the same rows read as (16-s, s) for
// s = 1, 2, 3, 7, 8: prints the largest difference of any output from the 16-row read (0 where the
// kernels are batch-invariant). Only ggml, so it runs where Python cannot: a cross-built aarch64
// ggml under qemu (patches/ggml-exact.patch on ARM's i8mm two-row path; docs/benchmarks/exact.md).
//
//   cmake -S <llama.cpp>/ggml -B build-arm -DCMAKE_TOOLCHAIN_FILE=<shared>/probes/aarch64.cmake \
//     -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8.6-a+dotprod+fp16+i8mm -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF
//   cmake --build build-arm --target ggml -j2
//   aarch64-linux-gnu-g++ -O2 -static -x c scripts/probes/matmul_invariance.c -I<llama.cpp>/ggml/include \
//     build-arm/src/libggml.a build-arm/src/libggml-cpu.a build-arm/src/libggml-base.a -lpthread -lm -o mi_arm
//   qemu-aarch64-static -cpu max ./mi_arm
#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K = 1024, N = 32, M = 16, THREADS = 2 };

// out[r*N + j] = W row j . X row r, for X rows [r0, r0 + m)
static void matmul(struct ggml_context * ctx, struct ggml_tensor * w, const float * x, int r0, int m, float * out) {
    struct ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, m);
    memcpy(b->data, x + (size_t) r0*K, sizeof(float)*K*m);
    struct ggml_tensor * y = ggml_mul_mat(ctx, w, b);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    ggml_graph_compute_with_ctx(ctx, g, THREADS);
    memcpy(out + (size_t) r0*N, y->data, sizeof(float)*N*m);
}

int main(void) {
    const enum ggml_type types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };
    const int splits[] = { 1, 2, 3, 7, 8 };
    static float wf[N*K], x[M*K], whole[M*N], parts[M*N];
    srand(1);
    for (int i = 0; i < N*K; ++i) { wf[i] = (float) rand() / RAND_MAX - 0.5f; }
    for (int i = 0; i < M*K; ++i) { x[i] = (float) rand() / RAND_MAX - 0.5f; }
    int failed = 0;
    for (size_t t = 0; t < sizeof(types)/sizeof(types[0]); ++t) {
        struct ggml_init_params ip = { 64u << 20, NULL, false };
        struct ggml_context * ctx = ggml_init(ip);
        struct ggml_tensor * w = ggml_new_tensor_2d(ctx, types[t], K, N);
        ggml_quantize_chunk(types[t], wf, w->data, 0, N, K, NULL);
        matmul(ctx, w, x, 0, M, whole);
        printf("%-5s", ggml_type_name(types[t]));
        for (size_t s = 0; s < sizeof(splits)/sizeof(splits[0]); ++s) {
            matmul(ctx, w, x, 0, M - splits[s], parts);
            matmul(ctx, w, x, M - splits[s], splits[s], parts);
            float diff = 0.0f;
            for (int i = 0; i < M*N; ++i) { diff = fmaxf(diff, fabsf(parts[i] - whole[i])); }
            failed |= diff != 0.0f;
            printf("  split %d: %g", splits[s], diff);
        }
        printf("\n");
        ggml_free(ctx);
    }
    return failed;
}
