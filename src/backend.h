// backend.h — one op interface, two backends. Each op (ops.c, router.c, dispatcher.c,
// experts.c) begins with ON_GPU(cu_op(args)): on a GPU run it calls the CUDA version of
// itself (src/cuda) and returns; otherwise the CPU code below it runs.
#pragma once
#include "alloc.h"
#ifdef TED_CUDA
#include "cuda/cuda_ops.h"
#define ON_GPU(call) do { if (ted_device == DEV_CUDA) { call; return; } } while (0)
#else
#define ON_GPU(call) do { } while (0)
#endif
