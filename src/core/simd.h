// simd.h — the hot element-wise loops picked at run time for the CPU they run on. The default
// build targets x86-64-v2 (CMakeLists.txt: any x86-64 node of a cluster); a function marked
// TED_CLONES is compiled also for x86-64-v3 (AVX2, FMA, F16C) and x86-64-v4 (AVX-512), and the
// loader picks the clone this CPU runs (GCC's target_clones, an ifunc). OpenMP bodies inside are
// cloned with it, and glibc's vector expf is called at each clone's width. A -march=native build
// (TED_NATIVE) and other compilers or CPUs compile each function once.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(TED_NATIVE)
#define TED_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TED_CLONES
#endif
