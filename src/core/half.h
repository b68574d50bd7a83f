// half.h — 16-bit storage formats: bfloat16 (round to nearest even) and IEEE fp16.
#pragma once
#include <stdint.h>
#include <string.h>
#include "core/precision.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)   // clang's builtin has no "f16c"
#include <immintrin.h>
#define TED_F16C
#endif

static inline uint16_t bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// IEEE half: _Float16, or clang's storage-only __fp16 where this target has no _Float16
// (the sanitizer build, tests/fuzz/build.sh); both convert with round to nearest even.
#if defined(__clang__) && !defined(__FLT16_MAX__)
typedef __fp16 ted_f16;
#else
typedef _Float16 ted_f16;
#endif
static inline uint16_t fp16_from_f32(float f) {
    ted_f16 h = (ted_f16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static inline float fp16_to_f32(uint16_t u) {
    ted_f16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
// n fp16 values to fp32 and back (round to nearest even), 8 at a time with the F16C instructions
// where the CPU has them (gcc does not vectorise the _Float16 conversions): compiled for AVX + F16C
// whatever the build's ISA level, and taken when this CPU runs them (every x86-64-v3 CPU).
#ifdef TED_F16C
static inline int cpu_f16c(void) { return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c"); }
__attribute__((target("avx,f16c"))) static inline long fp16_to_f32_f16c(float *out, const uint16_t *in, long n) {
    long j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + j))));
    return j;
}
__attribute__((target("avx,f16c"))) static inline long fp16_from_f32_f16c(uint16_t *out, const float *in, long n) {
    long j = 0;
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128((__m128i *)(out + j), _mm256_cvtps_ph(_mm256_loadu_ps(in + j), _MM_FROUND_TO_NEAREST_INT));
    return j;
}
#endif
static inline void fp16_to_f32_n(float *out, const uint16_t *in, long n) {
    long j = 0;
#ifdef TED_F16C
    if (cpu_f16c()) j = fp16_to_f32_f16c(out, in, n);
#endif
    for (; j < n; j++) out[j] = fp16_to_f32(in[j]);
}
static inline void fp16_from_f32_n(uint16_t *out, const float *in, long n) {
    long j = 0;
#ifdef TED_F16C
    if (cpu_f16c()) j = fp16_from_f32_f16c(out, in, n);
#endif
    for (; j < n; j++) out[j] = fp16_from_f32(in[j]);
}
// kind: PREC_BF16 or PREC_FP16
static inline uint16_t half_from_f32(Precision kind, float f) { return kind == PREC_BF16 ? bf16_from_f32(f) : fp16_from_f32(f); }
static inline float half_to_f32(Precision kind, uint16_t h) { return kind == PREC_BF16 ? bf16_to_f32(h) : fp16_to_f32(h); }
