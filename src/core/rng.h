// rng.h — counter-based randomness: a value depends only on (seed, stream, index), so
// initial weights and batch choice never depend on the parallel layout or on history.
#pragma once
#include <stdint.h>
#include <math.h>

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline uint64_t rng_hash_str(const char *s) {   // FNV-1a, then mixed
    uint64_t h = 1469598103934665603ull;
    while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ull; }
    return splitmix64(h);
}
static inline uint64_t rng_at(uint64_t seed, uint64_t stream, uint64_t i) {
    return splitmix64(splitmix64(seed ^ splitmix64(stream)) + i);
}
// uniform in (0, 1)
static inline double rng_uniform(uint64_t bits) { return ((bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
// standard normal (Box–Muller on two derived uniforms)
static inline float rng_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    double u1 = rng_uniform(rng_at(seed, stream, 2 * i)), u2 = rng_uniform(rng_at(seed, stream, 2 * i + 1));
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
