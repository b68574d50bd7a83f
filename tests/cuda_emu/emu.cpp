// emu.cpp — the CPU emulation of the CUDA runtime, cuBLAS and the kernel execution model
// that ted's GPU path uses (see emu.h). Linked instead of cudart / cuBLAS / NCCL into ted_emu
// and the emulated op tests. What it checks besides computing:
//  - device memory is one arena that is unreadable from the host except while the stream
//    runs: host code that dereferences a device pointer dies with a message (SIGSEGV handler);
//  - stream work runs when the host synchronises, so a host that reads a pinned buffer before
//    cudaStreamSynchronize, or rewrites one that a queued copy still reads, gets wrong numbers;
//  - new device memory is NaN-filled; a red zone after every allocation is checked at free
//    and at exit (out-of-bounds writes); freed memory is NaN-filled again;
//  - kernel pointer arguments, copies, memsets and every GEMM operand lie inside device
//    allocations; launch configurations are valid; warp operations see full warps;
//  - GEMMs take the type combinations the library takes (fp32; bf16 or fp16 A and B with a C of
//    their type or fp32), multiply exactly what the types hold, round C to its type, and stop
//    the run on a FAST_* compute type with fp32 operands.
// TED_EMU_STATS=1 prints counts at exit; TED_EMU_NOPROTECT=1 leaves device memory readable
// (for debuggers).
#include "emu.h"
#include <cublasLt.h>
#include <nccl.h>
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

static struct {
    long launches, blocks, fiber_blocks, switches, gemms, gemms_f32, copies;
    size_t dev_bytes, dev_peak;
} stats;

[[noreturn]] static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    void *bt[32];
    backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
    abort();
}

// One lock for every entry point: host threads (OpenMP) may call in concurrently.
static std::recursive_mutex api_mutex;
#define LOCK std::lock_guard<std::recursive_mutex> lock_(api_mutex)

// =======================================================================================
// fibers: the threads of a block that synchronises

static void fiber_main(void);

#if defined(__x86_64__)
// a context is its saved stack pointer; the callee-saved registers, MXCSR and the x87
// control word are on that stack
struct Ctx { void *sp; };
extern "C" void emu_ctx_switch(void **save_sp, void *to_sp);
extern "C" void emu_fiber_entry(void);
asm(R"(
    .text
    .globl emu_ctx_switch
    .hidden emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
    .globl emu_fiber_entry
    .hidden emu_fiber_entry
    .type emu_fiber_entry, @function
emu_fiber_entry:
    callq *%r13
    ud2
    .size emu_fiber_entry, .-emu_fiber_entry
)");
// stack_top 16-aligned; the first switch pops the frame written here and returns into
// emu_fiber_entry with r13 = fiber_main and a 16-aligned stack
static void ctx_init(Ctx &c, char *stack_lo, size_t size) {
    uint64_t *top = (uint64_t *)(((uintptr_t)(stack_lo + size)) & ~(uintptr_t)15);
    uint32_t csr[2];
    asm volatile("stmxcsr %0; fnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    top[-1] = (uint64_t)(uintptr_t)emu_fiber_entry;       // return address
    top[-2] = 0; top[-3] = 0;                               // rbp, rbx
    top[-4] = 0; top[-5] = (uint64_t)(uintptr_t)fiber_main; // r12, r13
    top[-6] = 0; top[-7] = 0;                               // r14, r15
    memcpy(&top[-8], csr, 8);
    c.sp = &top[-8];
}
static inline void ctx_switch(Ctx &from, Ctx &to) { emu_ctx_switch(&from.sp, to.sp); }
#else
struct Ctx { ucontext_t uc; };
static void ctx_init(Ctx &c, char *stack_lo, size_t size) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack_lo;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = NULL;
    makecontext(&c.uc, fiber_main, 0);
}
static inline void ctx_switch(Ctx &from, Ctx &to) { swapcontext(&from.uc, &to.uc); }
#endif

// =======================================================================================
// running a block

enum State : uint8_t { READY, AT_WARP, AT_BLOCK, DONE };
enum { WARP_BALLOT = 16, WARP_SYNC = 17 };   // warp operations besides the shuffles (EmuShfl)
struct Fiber { Ctx ctx; State state; };
struct Warp { int arrived, exited, op; unsigned gen; };

static constexpr size_t kStack = 128 << 10;   // per fiber, plus a guard page below it
// Which ready thread runs next (TED_EMU_SCHEDULE): round robin (default: each runs to its
// next barrier in turn), or always the lowest-numbered ready one ("low": warp 0 runs ahead as
// far as it can), or the highest ("high": warp 0 runs last). The last two expose a missing
// __syncthreads (a warp that reuses shared memory before a slower one has read it).
enum Schedule { ROUND_ROBIN, LOW_FIRST, HIGH_FIRST };
static Schedule schedule_from_env(void) {
    const char *s = getenv("TED_EMU_SCHEDULE");
    if (!s || !*s || !strcmp(s, "roundrobin")) return ROUND_ROBIN;
    if (!strcmp(s, "low")) return LOW_FIRST;
    if (!strcmp(s, "high")) return HIGH_FIRST;
    fprintf(stderr, "emu: TED_EMU_SCHEDULE=%s: expected roundrobin, low or high\n", s);
    exit(2);
}
static const Schedule schedule = schedule_from_env();
static struct {
    const char *kernel;
    EmuKernel *k;
    bool fibers;                   // false: the kernel has no barrier, threads run as a loop
    unsigned nt, live, at_block, cur;
    Ctx sched;
    std::vector<Fiber> fib;
    std::vector<Warp> warp;
    std::vector<uint64_t> slot[2];  // warp operands, double-buffered by the warp's generation
    uint64_t ready[1024 / 64];      // bit i: thread i is READY
    char *stacks;
    size_t nstacks;
    const void *fn;                 // the kernel's address (launches with dynamic shared memory)
    size_t shmem;                   // its dynamic shared memory (bytes)
} R;
static unsigned char *dyn_base;           // the mapping that holds the dynamic shared memory
static size_t dyn_map;                    // its size; its last page is PROT_NONE (overruns fault)
static void dynamic_shared_block(void);   // section "dynamic shared memory, async copies, ..."
static void copies_thread_exit(unsigned thread);
static void copies_launch(unsigned threads);

static void set_thread(unsigned i) {
    R.cur = i;
    threadIdx.x = i % blockDim.x;
    threadIdx.y = (i / blockDim.x) % blockDim.y;
    threadIdx.z = i / (blockDim.x * blockDim.y);
}

static void grow_stacks(unsigned n) {
    if (n <= R.nstacks) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), one = kStack + page;
    if (R.stacks) munmap(R.stacks, R.nstacks * one);
    R.stacks = (char *)mmap(NULL, n * one, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (R.stacks == MAP_FAILED) die("no memory for %u fiber stacks", n);
    for (unsigned i = 0; i < n; i++) mprotect(R.stacks + i * one, page, PROT_NONE);   // overflow guard
    R.nstacks = n;
}
static char *stack_of(unsigned i) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return R.stacks + i * (kStack + page) + page;
}

static inline void yield(void) {
    stats.switches++;
    ctx_switch(R.fib[R.cur].ctx, R.sched);
}

static void set_state(unsigned i, State st) {
    R.fib[i].state = st;
    if (st == READY) R.ready[i / 64] |= 1ull << (i % 64);
    else R.ready[i / 64] &= ~(1ull << (i % 64));
}

// the first ready thread at or after `from`, wrapping around; -1 if none
static int next_ready(unsigned from) {
    unsigned nw = (R.nt + 63) / 64;
    for (unsigned k = 0; k <= nw; k++) {
        unsigned w = (from / 64 + k) % nw;
        uint64_t bits = R.ready[w];
        if (k == 0) bits &= ~0ull << (from % 64);
        if (bits) return (int)(w * 64 + (unsigned)__builtin_ctzll(bits));
    }
    return -1;
}

// the highest-numbered ready thread; -1 if none
static int last_ready(void) {
    for (int w = (int)((R.nt + 63) / 64) - 1; w >= 0; w--)
        if (R.ready[w]) return w * 64 + 63 - __builtin_clzll(R.ready[w]);
    return -1;
}

static void release_block(void) {
    for (unsigned i = 0; i < R.nt; i++)
        if (R.fib[i].state == AT_BLOCK) set_state(i, READY);
    R.at_block = 0;
}

static void fiber_main(void) {
    R.k->run_thread();
    copies_thread_exit(R.cur);
    Fiber &f = R.fib[R.cur];
    set_state(R.cur, DONE);
    R.live--;
    if (R.nt % 32 == 0) {
        Warp &w = R.warp[R.cur / 32];
        w.exited++;
        if (w.arrived)
            die("kernel %s: thread %u exited while other lanes of its warp wait at a warp operation", R.kernel, R.cur);
    }
    if (R.at_block && R.at_block == R.live) release_block();   // exited threads count as arrived
    ctx_switch(f.ctx, R.sched);
    die("a finished fiber was resumed");
}

[[noreturn]] static void no_barrier_expected(const char *what) {
    die("kernel %s calls %s, but transform.py found no barrier in it: fix its analysis", R.kernel, what);
}

void __syncthreads(void) {
    if (!R.fibers) no_barrier_expected("__syncthreads");
    set_state(R.cur, AT_BLOCK);
    if (++R.at_block == R.live) release_block();   // the last one goes on at once
    else yield();
}

// The calling lane hands in its operand; returns when the 32 lanes of its warp have, with
// the buffer that holds the operands (indexed by thread).
// With run: the last lane to arrive calls it with the operands of the 32 lanes (as pointers)
// before any lane goes on (emu_warp_collective).
static const uint64_t *warp_op(unsigned mask, int op, uint64_t bits, void (*run)(void *const *) = NULL) {
    if (!R.fibers) no_barrier_expected("a warp shuffle or vote");
    if (mask != 0xffffffffu) die("kernel %s: warp operation with mask %#x (only full warps are emulated)", R.kernel, mask);
    if (R.nt % 32) die("kernel %s: warp operation in a block of %u threads (not whole warps)", R.kernel, R.nt);
    Warp &w = R.warp[R.cur / 32];
    if (w.exited) die("kernel %s: warp operation after lanes of the warp exited (full mask)", R.kernel);
    if (w.arrived == 0) w.op = op;
    else if (w.op != op) die("kernel %s: lanes of warp %u are at different warp operations", R.kernel, R.cur / 32);
    uint64_t *buf = R.slot[w.gen & 1].data();
    buf[R.cur] = bits;
    set_state(R.cur, AT_WARP);
    if (++w.arrived == 32) {
        unsigned base = R.cur & ~31u;
        if (run) {
            void *args[32];
            for (unsigned l = 0; l < 32; l++) args[l] = (void *)(uintptr_t)buf[base + l];
            run(args);
        }
        for (unsigned l = 0; l < 32; l++) set_state(base + l, READY);
        w.arrived = 0;
        w.gen++;
    } else {
        yield();
    }
    return buf;
}

uint64_t emu_shfl(unsigned mask, uint64_t bits, EmuShfl op, int arg, int width) {
    if (width != 32) die("kernel %s: shuffle of width %d (only 32 is emulated)", R.kernel, width);
    const uint64_t *buf = warp_op(mask, op, bits);
    int lane = (int)(R.cur & 31), src = lane;
    switch (op) {
        case EMU_SHFL_IDX: src = arg & 31; break;
        case EMU_SHFL_UP: src = lane - arg >= 0 ? lane - arg : lane; break;
        case EMU_SHFL_DOWN: src = lane + arg < 32 ? lane + arg : lane; break;
        case EMU_SHFL_XOR: src = (lane ^ arg) < 32 ? lane ^ arg : lane; break;
    }
    return buf[(R.cur & ~31u) + (unsigned)src];
}

unsigned __ballot_sync(unsigned mask, int pred) {
    const uint64_t *buf = warp_op(mask, WARP_BALLOT, pred != 0);
    unsigned m = 0, base = R.cur & ~31u;
    for (unsigned l = 0; l < 32; l++) m |= (unsigned)buf[base + l] << l;
    return m;
}

void __syncwarp(unsigned mask) { warp_op(mask, WARP_SYNC, 0); }

static void run_block(void) {
    stats.blocks++;
    dynamic_shared_block();
    if (!R.fibers) {
        for (unsigned i = 0; i < R.nt; i++) { set_thread(i); R.k->run_thread(); copies_thread_exit(i); }
        return;
    }
    stats.fiber_blocks++;
    memset(R.ready, 0, sizeof R.ready);
    for (unsigned i = 0; i < R.nt; i++) { ctx_init(R.fib[i].ctx, stack_of(i), kStack); set_state(i, READY); }
    for (Warp &w : R.warp) w = Warp{0, 0, 0, 0};
    R.live = R.nt;
    R.at_block = 0;
    unsigned from = 0;
    while (R.live) {
        int i = schedule == HIGH_FIRST ? last_ready() : next_ready(schedule == LOW_FIRST ? 0 : from);
        if (i >= 0) {
            set_thread((unsigned)i);
            stats.switches++;
            ctx_switch(R.sched, R.fib[i].ctx);
            from = (unsigned)i + 1 < R.nt ? (unsigned)i + 1 : 0;
        } else {
            unsigned at_warp = 0;
            for (const Fiber &f : R.fib) at_warp += f.state == AT_WARP;
            die("kernel %s, block (%u,%u,%u): deadlock: %u threads at __syncthreads, %u at warp operations, %u exited",
                R.kernel, blockIdx.x, blockIdx.y, blockIdx.z, R.at_block, at_warp, R.nt - R.live);
        }
    }
}

// ---- the order of a launch's blocks (TED_EMU_BLOCK_ORDER) ------------------------------
// forward (the default), reverse, or random (a fixed pseudo-random permutation per launch): a
// kernel whose result depends on the order of its blocks (a race between blocks, an atomic
// sum) gives other numbers under another order.
enum BlockOrder { ORDER_FORWARD, ORDER_REVERSE, ORDER_RANDOM };
static BlockOrder block_order_from_env(void) {
    const char *s = getenv("TED_EMU_BLOCK_ORDER");
    if (!s || !*s || !strcmp(s, "forward")) return ORDER_FORWARD;
    if (!strcmp(s, "reverse")) return ORDER_REVERSE;
    if (!strcmp(s, "random")) return ORDER_RANDOM;
    fprintf(stderr, "emu: TED_EMU_BLOCK_ORDER=%s: expected forward, reverse or random\n", s);
    exit(2);
}
static const BlockOrder block_order = block_order_from_env();

// the blocks of a grid of n in the order to run them
static void block_sequence(std::vector<unsigned long> &seq, unsigned long n) {
    seq.resize(n);
    for (unsigned long i = 0; i < n; i++) seq[i] = block_order == ORDER_REVERSE ? n - 1 - i : i;
    if (block_order != ORDER_RANDOM) return;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)stats.launches;
    for (unsigned long i = n; i > 1; i--) {   // Fisher–Yates with a splitmix-style generator
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        unsigned long j = (unsigned long)((z ^ (z >> 31)) % i);
        std::swap(seq[i - 1], seq[j]);
    }
}

static void run_launch(const char *name, bool sync, dim3 g, dim3 b, EmuKernel *k, const void *fn = NULL,
                       size_t shmem = 0) {
    stats.launches++;
    R.kernel = name;
    R.fn = fn;
    R.shmem = shmem;
    R.k = k;
    R.fibers = sync;
    R.nt = b.x * b.y * b.z;
    gridDim = g;
    blockDim = b;
    if (sync) {
        grow_stacks(R.nt);
        R.fib.resize(R.nt);
        R.warp.resize((R.nt + 31) / 32);
        R.slot[0].resize(R.nt);
        R.slot[1].resize(R.nt);
    }
    copies_launch(R.nt);
    static std::vector<unsigned long> seq;
    block_sequence(seq, (unsigned long)g.x * g.y * g.z);
    for (unsigned long i : seq) {
        blockIdx = uint3{(unsigned)(i % g.x), (unsigned)(i / g.x % g.y), (unsigned)(i / ((unsigned long)g.x * g.y))};
        run_block();
    }
}

// =======================================================================================
// device memory: one reserved arena, first fit, NaN-filled, a red zone after each block

static constexpr size_t kAlign = 256, kRed = 256;
static char *arena;
static size_t arena_size, arena_top, arena_open;   // reserved, handed out, readable (pages)
static std::map<size_t, size_t> free_list;          // offset → length, coalesced
struct DevBlock { size_t bytes, span; };
static std::map<uintptr_t, DevBlock> dev;           // start → sizes
static std::map<uintptr_t, size_t> pinned;          // cudaMallocHost blocks
static int window;                                  // > 0: device memory readable by the host
static bool no_protect;
static struct sigaction old_segv;

static void on_segv(int sig, siginfo_t *si, void *uc) {
    char *a = (char *)si->si_addr;
    if (arena && a >= arena && a < arena + arena_size) {
        char msg[200];
        int n = snprintf(msg, sizeof msg,
                         "emu: host code touched device memory at %p (a device pointer used on the host); backtrace:\n",
                         (void *)a);
        if (write(2, msg, (size_t)n) < 0) {}
        void *bt[32];
        backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    if (dyn_base && a >= (char *)dyn_base + dyn_map - sysconf(_SC_PAGESIZE) && a < (char *)dyn_base + dyn_map) {
        char msg[200];
        int n = snprintf(msg, sizeof msg, "emu: kernel %s accessed %p, past the end of its %zu bytes of dynamic "
                         "shared memory; backtrace:\n", R.kernel, (void *)a, R.shmem);
        if (write(2, msg, (size_t)n) < 0) {}
        void *bt[32];
        backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    sigaction(SIGSEGV, &old_segv, NULL);   // not ours: the fault repeats under the old handler
    (void)sig; (void)uc;
}

// (Re)installs the handler: MPI_Init may have put its own in since the last call.
static void guard_host_access(void) {
    struct sigaction cur;
    sigaction(SIGSEGV, NULL, &cur);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
}

static void at_exit(void);
static void arena_init(void) {
    if (arena) return;
    atexit(at_exit);   // registered after the tables were built: runs before they go
    no_protect = getenv("TED_EMU_NOPROTECT") && strcmp(getenv("TED_EMU_NOPROTECT"), "0");
    for (arena_size = (size_t)64 << 30; arena_size >= ((size_t)1 << 30); arena_size /= 2) {
        void *p = mmap(NULL, arena_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) { arena = (char *)p; break; }
    }
    if (!arena) die("cannot reserve the device arena");
}

static size_t page_round(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}
// device memory readable and writable by the host while a window is open (the stream runs)
static void open_window(void) {
    if (window++ == 0 && !no_protect && arena_top) {
        arena_open = page_round(arena_top);
        if (mprotect(arena, arena_open, PROT_READ | PROT_WRITE)) die("mprotect: %s", strerror(errno));
    }
}
static void close_window(void) {
    if (--window == 0 && !no_protect && arena_open) {
        if (mprotect(arena, arena_open, PROT_NONE)) die("mprotect: %s", strerror(errno));
        arena_open = 0;
    }
}
struct Window { Window() { open_window(); } ~Window() { close_window(); } };

static bool red_zone_intact(uintptr_t start, const DevBlock &b) {
    const unsigned char *p = (const unsigned char *)start + b.bytes, *end = (const unsigned char *)start + b.span;
    for (; p < end; p++) if (*p != 0xFF) return false;
    return true;
}

// the live block holding p (p == its end too when past_end), or NULL
static const std::pair<const uintptr_t, DevBlock> *find_dev(const void *p, bool past_end = false) {
    auto it = dev.upper_bound((uintptr_t)p);
    if (it == dev.begin()) return NULL;
    --it;
    uintptr_t a = (uintptr_t)p;
    if (a < it->first + it->second.bytes || (past_end && a == it->first + it->second.bytes)) return &*it;
    return NULL;
}
static bool is_dev(const void *p) { return find_dev(p) != NULL; }
static bool in_arena(const void *p) { return arena && (const char *)p >= arena && (const char *)p < arena + arena_size; }
static bool is_pinned(const void *p) {
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin()) return false;
    --it;
    return (uintptr_t)p < it->first + it->second;
}

// [p, p + n) must lie in one device allocation
static void check_span(const void *p, size_t n, const char *what) {
    if (!n) return;
    auto b = find_dev(p);
    if (!b) die("%s: %p is not device memory%s", what, p, in_arena(p) ? " (freed)" : "");
    if ((uintptr_t)p + n > b->first + b->second.bytes)
        die("%s: %zu bytes at %p run %zu bytes past the end of the allocation of %zu bytes at %p", what, n, p,
            (size_t)((uintptr_t)p + n - b->first - b->second.bytes), b->second.bytes, (void *)b->first);
}

void emu_check_kernel_pointer(const char *kernel, int arg, const void *p) {
    LOCK;
    if (p && !find_dev(p, true))
        die("kernel %s: pointer argument %d (%p) is not device memory%s", kernel, arg, p,
            in_arena(p) ? " (freed)" : is_pinned(p) ? " (pinned host memory)" : " (host memory)");
}

static void *dev_alloc(size_t bytes) {
    arena_init();
    guard_host_access();
    size_t span = (bytes + kAlign - 1) / kAlign * kAlign + kRed, off = SIZE_MAX;
    for (auto it = free_list.begin(); it != free_list.end(); ++it)
        if (it->second >= span) {
            off = it->first;
            if (it->second > span) free_list[off + span] = it->second - span;
            free_list.erase(it);
            break;
        }
    if (off == SIZE_MAX) {
        if (arena_top + span > arena_size) return NULL;
        off = arena_top;
        arena_top += span;
    }
    char *p = arena + off;
    dev[(uintptr_t)p] = DevBlock{bytes, span};
    stats.dev_bytes += bytes;
    if (stats.dev_bytes > stats.dev_peak) stats.dev_peak = stats.dev_bytes;
    Window w;
    memset(p, 0xFF, span);   // NaN in every float and double; the red zone too
    return p;
}

static void dev_free(void *p) {
    auto it = dev.find((uintptr_t)p);
    if (it == dev.end()) die("cudaFree(%p): not the start of a device allocation%s", p, in_arena(p) ? " (freed twice?)" : "");
    Window w;
    if (!red_zone_intact(it->first, it->second))
        die("cudaFree(%p): a kernel or copy wrote past the end of this allocation of %zu bytes", p, it->second.bytes);
    memset(p, 0xFF, it->second.span);   // use after free reads NaN
    size_t off = (size_t)((char *)p - arena), len = it->second.span;
    stats.dev_bytes -= it->second.bytes;
    dev.erase(it);
    auto nx = free_list.lower_bound(off);   // coalesce with the neighbours
    if (nx != free_list.end() && off + len == nx->first) { len += nx->second; nx = free_list.erase(nx); }
    if (nx != free_list.begin()) {
        auto pv = std::prev(nx);
        if (pv->first + pv->second == off) { pv->second += len; return; }
    }
    free_list[off] = len;
}

// =======================================================================================
// the streams: work queued in order on each, run when the host synchronises. Stream 0 is the
// default stream, the others come from cudaStreamCreate (ted's own stream first, side streams
// after it). Work on two streams is ordered only by events (cudaEventRecord, then
// cudaStreamWaitEvent). At a flush the streams run in the order TED_EMU_STREAMS names, so that
// a missing wait gives wrong numbers: "late" (the default) runs the earliest made stream that
// can run, as far as it can, so side streams run only when the main one waits for them or at
// the end (a join never asked for reads results not yet made); "early" runs the latest made
// first (a fork never asked for reads inputs not yet made). Stream 0 is the legacy default
// stream: its work waits for the work queued before it on every blocking stream (made without
// cudaStreamNonBlocking), and theirs for the work queued before it on stream 0.

struct QueuedOp { std::function<void()> fn; CUevent_st *wait; unsigned gen; unsigned long seq; };   // wait: for e's gen-th record
// an event: recorded gen times, the stream has reached its reached-th record (done: the latest)
struct CUevent_st { double ms; unsigned gen, reached; };
static bool done(const CUevent_st *e) { return e->gen && e->reached == e->gen; }
struct EmuStream { int *token; bool blocking; std::deque<QueuedOp> q; };
static int stream_token;                 // stream 0's handle points here
static std::vector<EmuStream> streams{EmuStream{&stream_token, true, {}}};
static unsigned long queued_ops;         // the order of enqueueing, across streams
static size_t cur_stream;                // the stream of the call being made (check_stream)
static const bool streams_early = [] {
    const char *v = getenv("TED_EMU_STREAMS");
    if (v && strcmp(v, "early") && strcmp(v, "late")) {
        fprintf(stderr, "TED_EMU_STREAMS=%s: expected late or early\n", v);
        exit(2);
    }
    return v && !strcmp(v, "early");
}();

static void check_stream(cudaStream_t s, const char *what) {
    cur_stream = 0;
    if (s == (cudaStream_t)0) return;
    for (size_t i = 0; i < streams.size(); i++)
        if (s == (cudaStream_t)streams[i].token) { cur_stream = i; return; }
    die("%s: unknown stream %p", what, (void *)s);
}
static void enqueue(std::function<void()> op) {
    streams[cur_stream].q.push_back(QueuedOp{std::move(op), NULL, 0, ++queued_ops});
}

// whether stream i's next op can run now: not a wait for an event not yet reached, nor behind
// work queued earlier on stream 0 (a blocking stream) or on a blocking stream (stream 0)
static bool can_run(size_t i) {
    if (streams[i].q.empty()) return false;
    const QueuedOp &op = streams[i].q.front();
    if (op.wait && op.wait->reached < op.gen) return false;
    for (size_t j = 0; j < streams.size() && streams[i].blocking; j++)
        if ((i == 0) != (j == 0) && streams[j].blocking && !streams[j].q.empty() && streams[j].q.front().seq < op.seq)
            return false;
    return true;
}
static void flush(void) {
    bool any = false;
    for (auto &st : streams) any |= !st.q.empty();
    if (!any) return;
    Window w;
    for (;;) {
        size_t pick = streams.size(), n = streams.size();
        for (size_t k = 0; k < n && pick == n; k++) {   // late: 0, 1, 2, ...; early: n - 1, ..., 0
            size_t i = streams_early ? n - 1 - k : k;
            if (can_run(i)) pick = i;
        }
        if (pick == n) {
            for (auto &st : streams)
                if (!st.q.empty()) die("a stream waits for an event that no queued work will record");
            return;
        }
        QueuedOp op = std::move(streams[pick].q.front());
        streams[pick].q.pop_front();
        if (op.fn) op.fn();
    }
}
// What the host sees done when it waits for stream t alone (cudaStreamSynchronize, a copy to
// pageable memory): t's queued work, and where t waits for an event, the work that records it.
// Late: nothing else runs, so side work that t never waits for stays queued past the host's wait
// (a join never asked for reads results not yet made, even when the host waits in between);
// early: every stream, as at a flush.
static void flush_for(size_t t) {
    if (streams_early) { flush(); return; }
    Window w;
    while (!streams[t].q.empty()) {
        size_t pick = can_run(t) ? t : streams.size();
        for (size_t i = 0; i < streams.size() && pick == streams.size(); i++)
            if (can_run(i)) pick = i;
        if (pick == streams.size()) die("a stream waits for an event that no queued work will record");
        QueuedOp op = std::move(streams[pick].q.front());
        streams[pick].q.pop_front();
        if (op.fn) op.fn();
    }
}

static void check_launch(const char *name, dim3 g, dim3 b, cudaStream_t s) {
    check_stream(s, name);
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || g.y > 65535 || g.z > 65535 || g.x > 0x7fffffffu)
        die("kernel %s: invalid grid (%u, %u, %u)", name, g.x, g.y, g.z);
    if (!nt || nt > 1024 || b.z > 64) die("kernel %s: invalid block (%u, %u, %u)", name, b.x, b.y, b.z);
}

void emu_enqueue_launch(const char *name, bool sync, dim3 g, dim3 b, size_t shmem, cudaStream_t s, EmuKernel *k) {
    LOCK;
    check_launch(name, g, b, s);
    if (shmem) die("kernel %s: dynamic shared memory through a launch transform.py did not name", name);
    std::shared_ptr<EmuKernel> kp(k);
    enqueue([name, sync, g, b, kp] { run_launch(name, sync, g, b, kp.get()); });
}

// =======================================================================================
// CUDA runtime

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp *p, int d) {
    if (d != 0) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation (tests/cuda_emu)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->multiProcessorCount = 1;
    p->sharedMemPerBlock = 48 << 10;           // as sm_90
    p->sharedMemPerBlockOptin = 227 << 10;
    p->sharedMemPerMultiprocessor = 228 << 10;
    return cudaSuccess;
}
#undef cudaGetDeviceProperties
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) { return cudaGetDeviceProperties_v2(p, d); }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }   // errors die where they happen
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        default: return "cudaError (emulated)";
    }
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : cudaGetErrorName(e); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    LOCK;
    streams.push_back(EmuStream{new int(0), !(flags & cudaStreamNonBlocking), {}});
    *s = (cudaStream_t)streams.back().token;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { LOCK; check_stream(s, "cudaStreamDestroy"); flush(); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    LOCK;
    check_stream(s, "cudaStreamSynchronize");
    flush_for(cur_stream);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { LOCK; flush(); return cudaSuccess; }

cudaError_t cudaMalloc(void **p, size_t bytes) {
    LOCK;
    *p = dev_alloc(bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {   // synchronises, as CUDA's does
    LOCK;
    flush();
    if (p) dev_free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    LOCK;
    if (posix_memalign(p, 256, bytes ? bytes : 1)) return cudaErrorMemoryAllocation;
    memset(*p, 0xFF, bytes);
    pinned[(uintptr_t)*p] = bytes ? bytes : 1;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    LOCK;
    flush();
    if (!p) return cudaSuccess;
    if (!pinned.erase((uintptr_t)p)) die("cudaFreeHost(%p): not a cudaMallocHost block", p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    LOCK;
    memset(a, 0, sizeof *a);
    a->device = 0;
    if (is_dev(p)) { a->type = cudaMemoryTypeDevice; a->devicePointer = (void *)p; }
    else if (is_pinned(p)) { a->type = cudaMemoryTypeHost; a->hostPointer = (void *)p; a->devicePointer = (void *)p; }
    else a->type = cudaMemoryTypeUnregistered;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    LOCK;
    check_stream(s, "cudaMemcpyAsync");
    if (!n) return cudaSuccess;
    stats.copies++;
    bool dd = is_dev(dst), sd = is_dev(src);
    static const char *kinds[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToHost && !dd && !sd) ||
              (kind == cudaMemcpyHostToDevice && dd && !sd) || (kind == cudaMemcpyDeviceToHost && !dd && sd) ||
              (kind == cudaMemcpyDeviceToDevice && dd && sd);
    if (!ok || (unsigned)kind > 4)
        die("cudaMemcpyAsync(%p, %p, %zu, %s): the pointers are %s to %s", dst, src, n,
            (unsigned)kind <= 4 ? kinds[kind] : "?", sd ? "device" : "host", dd ? "device" : "host");
    if (!dd && in_arena(dst)) die("cudaMemcpyAsync: destination %p is freed device memory", dst);
    if (!sd && in_arena(src)) die("cudaMemcpyAsync: source %p is freed device memory", src);
    if (dd) check_span(dst, n, "cudaMemcpyAsync destination");
    if (sd) check_span(src, n, "cudaMemcpyAsync source");
    if (dd && sd) {
        const char *a = (const char *)dst, *b = (const char *)src;
        if (a < b + n && b < a + n) die("cudaMemcpyAsync: overlapping device ranges %p and %p (%zu bytes)", dst, src, n);
        enqueue([=] { memcpy(dst, src, n); });
    } else if (dd) {
        if (is_pinned(src)) enqueue([=] { memcpy(dst, src, n); });   // reads src when it runs
        else {                                                       // pageable: staged now
            auto copy = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
            enqueue([=] { memcpy(dst, copy->data(), n); });
        }
    } else if (sd) {
        enqueue([=] { memcpy(dst, src, n); });
        if (!is_pinned(dst)) flush_for(cur_stream);                   // pageable: returns when done
    } else {
        flush();
        memmove(dst, src, n);
    }
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    LOCK;
    cudaMemcpyAsync(dst, src, n, kind, 0);
    flush();
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    LOCK;
    check_stream(s, "cudaMemsetAsync");
    check_span(p, n, "cudaMemsetAsync");
    if (n) enqueue([=] { memset(p, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) { LOCK; cudaMemsetAsync(p, v, n, 0); flush(); return cudaSuccess; }

// =======================================================================================
// CUDA events (what TED_GPU_PROF uses): an event records the stream's position; when the
// stream reaches it, it takes the host's clock, so elapsed times are the emulation's own
// (meaningless as GPU times, but the profiler's bookkeeping runs as on a GPU). An elapsed time
// between events not yet reached is an error, as on a GPU (cudaErrorNotReady), and stops.

static double events_clock_ms;   // added to the host's clock (cuBLASLt's algorithms, below)
static double now_ms_emu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6 + events_clock_ms;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new CUevent_st{0, 0, 0}; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { LOCK; flush(); delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    LOCK;
    check_stream(s, "cudaEventRecord");
    unsigned gen = ++e->gen;
    enqueue([e, gen] { e->ms = now_ms_emu(); e->reached = gen; });
    return cudaSuccess;
}
// the stream's later work waits until the event's latest record is reached (none: no wait)
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    LOCK;
    check_stream(s, "cudaStreamWaitEvent");
    if (flags) die("cudaStreamWaitEvent: flags %u (the emulation knows 0)", flags);
    if (e->gen) streams[cur_stream].q.push_back(QueuedOp{nullptr, e, e->gen, ++queued_ops});
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { LOCK; flush(); return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) { return done(e) ? cudaSuccess : cudaErrorNotReady; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a->gen || !b->gen) die("cudaEventElapsedTime: an event that was never recorded");
    if (!done(a) || !done(b)) die("cudaEventElapsedTime: an event the stream has not reached (cudaErrorNotReady)");
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

// =======================================================================================
// cuBLAS: column-major reference GEMM (double accumulation) on the operand types the call
// names, as the library's contract has them: the (A, B, C) type combinations and compute
// types of the cuBLAS documentation that ted can use, and nothing else. fp32 operands are
// multiplied exactly (CUBLAS_COMPUTE_32F or _PEDANTIC; TF32 only under the TF32 math mode);
// bf16 and fp16 operands (CUBLAS_COMPUTE_32F) are exact by their type, and the result is
// rounded to C's type. A FAST_* compute type on fp32 operands stops the run: it permits the
// library to round the operands as it likes (cuBLAS picks TF32 for FAST_16BF on an H100), so
// no emulation can say what the GPU computes. Every operand must lie in device memory.

struct cublasContext { cublasMath_t math; cudaStream_t stream; };
enum Rounding { EXACT, TF32 };

static float round_tf32(float x) {
    if (isnan(x)) return x;
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0xfffu + ((u >> 13) & 1);   // to nearest even, 10 mantissa bits kept
    u &= ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

static const char *type_name(cudaDataType t) {
    switch (t) {
        case CUDA_R_32F: return "CUDA_R_32F";
        case CUDA_R_16BF: return "CUDA_R_16BF";
        case CUDA_R_16F: return "CUDA_R_16F";
        default: return "another type";
    }
}
static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// element i of an operand of type t, as fp32
static float load_as_f32(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// x rounded to nearest even into element i of a C of type t
static void store_from_f32(void *p, cudaDataType t, size_t i, float x) {
    if (t == CUDA_R_32F) { ((float *)p)[i] = x; return; }
    if (t == CUDA_R_16F) { _Float16 h = (_Float16)x; memcpy((uint16_t *)p + i, &h, 2); return; }
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;   // NaN stays a NaN
    else u += 0x7fffu + ((u >> 16) & 1u);
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

// The types and compute type of one call. grouped: cublasGemmGroupedBatchedEx, whose table has
// 16-bit A and B with a C of the same type only. Returns false (the call answers
// CUBLAS_STATUS_NOT_SUPPORTED, with one line saying why) for what the library refuses; stops
// the run for a FAST_* compute type on fp32 operands.
static bool types_of(const char *what, const cublasContext *h, cudaDataType a, cudaDataType b, cudaDataType c,
                     cublasComputeType_t cmp, bool grouped, Rounding *r) {
    bool fast = cmp == CUBLAS_COMPUTE_32F_FAST_16BF || cmp == CUBLAS_COMPUTE_32F_FAST_16F ||
                cmp == CUBLAS_COMPUTE_32F_FAST_TF32;
    if (fast && a == CUDA_R_32F && b == CUDA_R_32F)
        die("%s: compute type %d (FAST_*) on fp32 operands: the library may round them to TF32 (or anything it "
            "allows); give bf16 operands with CUBLAS_COMPUTE_32F, or fp32 ones with CUBLAS_COMPUTE_32F", what, (int)cmp);
    *r = (h->math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH && a == CUDA_R_32F ? TF32 : EXACT;
    bool f32 = a == CUDA_R_32F && b == CUDA_R_32F && c == CUDA_R_32F;
    bool half = a == b && (a == CUDA_R_16BF || a == CUDA_R_16F) && (c == a || (!grouped && c == CUDA_R_32F));
    bool ok = (cmp == CUBLAS_COMPUTE_32F || cmp == CUBLAS_COMPUTE_32F_PEDANTIC) && (f32 || half);
    if (!ok)
        fprintf(stderr, "emu: %s: A %s, B %s, C %s with compute type %d is not a combination the library takes\n", what,
                type_name(a), type_name(b), type_name(c), (int)cmp);
    return ok;
}

static void check_handle(cublasHandle_t h, const char *what) {
    if (!h) die("%s: NULL cuBLAS handle", what);
    check_stream(h->stream, what);
}
static void check_host_scalar(const char *what, const void *p) {
    if (!p || is_dev(p)) die("%s: alpha/beta must be host pointers (CUBLAS_POINTER_MODE_HOST)", what);
}

struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    Rounding r;
    cudaDataType at, bt, ct;
    int split = 0;   // a split-K algorithm's order: the two halves of k summed apart, then added in fp32
    int epi = 0;     // cuBLASLt's epilogue (cublasLtEpilogue_t; 0: none), on bf16 bias [m] and aux [m, n] (ld auxld)
    const void *bias = nullptr;
    void *aux = nullptr;
    int64_t auxld = 0;
};

// GELU (tanh form) and its derivative, as the model's (src/nn/ops.c)
static float emu_gelu(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
static float emu_gelu_grad(float x) {
    const float k = 0.7978845608028654f;
    float th = tanhf(k * (x + 0.044715f * x * x * x)), dudx = k * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dudx;
}

static void check_ld(const char *what, const Gemm &g) {
    int ar = g.ta == CUBLAS_OP_N ? g.m : g.k, br = g.tb == CUBLAS_OP_N ? g.k : g.n;
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.lda < (ar > 1 ? ar : 1) || g.ldb < (br > 1 ? br : 1) || g.ldc < (g.m > 1 ? g.m : 1) ||
        (g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) || (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T))
        die("%s: invalid sizes m %d n %d k %d lda %d ldb %d ldc %d", what, g.m, g.n, g.k, g.lda, g.ldb, g.ldc);
}

// C[m,n] = alpha·op(A)·op(B) + beta·C, column-major (runs in the stream)
// cuBLASLt's epilogue on element (i, j) of the product, v in fp32: + bias[i]; GELU with its input
// stored in aux (bf16), or the product times GELU'(aux)
static float lt_epilogue(const Gemm &g, int i, int j, float v) {
    size_t x = i + (size_t)j * g.auxld;
    if (g.epi & CUBLASLT_EPILOGUE_BIAS) v += load_as_f32(g.bias, CUDA_R_16BF, i);
    if (g.epi == CUBLASLT_EPILOGUE_DGELU) return v * emu_gelu_grad(load_as_f32(g.aux, CUDA_R_16BF, x));
    if (g.epi & CUBLASLT_EPILOGUE_GELU) {
        store_from_f32(g.aux, CUDA_R_16BF, x, v);
        return emu_gelu(v);
    }
    return v;
}

static void gemm_run(const char *what, const Gemm &g, const void *A, const void *B, void *C) {
    stats.gemms++;
    stats.gemms_f32 += g.at == CUDA_R_32F;
    if (g.m == 0 || g.n == 0) return;
    // the extent each operand touches, as stored: op N is rows × cols with stride ld
    auto extent = [](bool n, int r, int c, int ld) { return ((size_t)(n ? c : r) - 1) * ld + (n ? r : c); };
    if (g.k > 0) {
        check_span(A, type_size(g.at) * extent(g.ta == CUBLAS_OP_N, g.m, g.k, g.lda), what);
        check_span(B, type_size(g.bt) * extent(g.tb == CUBLAS_OP_N, g.k, g.n, g.ldb), what);
    }
    check_span(C, type_size(g.ct) * extent(true, g.m, g.n, g.ldc), what);
    if (g.epi & CUBLASLT_EPILOGUE_BIAS) check_span(g.bias, 2 * (size_t)g.m, what);
    if (g.aux) check_span(g.aux, 2 * extent(true, g.m, g.n, (int)g.auxld), what);
    auto rounded = [&](float x) { return g.r == TF32 ? round_tf32(x) : x; };
    // op(A) as rows of k, op(B)ᵀ as rows of k: the inner loop runs over contiguous memory
    std::vector<float> a((size_t)g.m * g.k), b((size_t)g.n * g.k);
    for (int i = 0; i < g.m; i++)
        for (int l = 0; l < g.k; l++)
            a[(size_t)i * g.k + l] =
                rounded(load_as_f32(A, g.at, g.ta == CUBLAS_OP_N ? i + (size_t)l * g.lda : l + (size_t)i * g.lda));
    for (int j = 0; j < g.n; j++)
        for (int l = 0; l < g.k; l++)
            b[(size_t)j * g.k + l] =
                rounded(load_as_f32(B, g.bt, g.tb == CUBLAS_OP_N ? l + (size_t)j * g.ldb : j + (size_t)l * g.ldb));
    for (int j = 0; j < g.n; j++)
        for (int i = 0; i < g.m; i++) {
            const float *x = &a[(size_t)i * g.k], *y = &b[(size_t)j * g.k];
            double s = 0;
            for (int l = 0; l < g.k; l++) s += (double)x[l] * y[l];
            if (g.split) {
                double h = 0;
                for (int l = 0; l < g.k / 2; l++) h += (double)x[l] * y[l];
                s = (double)((float)h + (float)(s - h));
            }
            size_t at = i + (size_t)j * g.ldc;
            double c = g.beta == 0.0f ? 0.0 : (double)g.beta * load_as_f32(C, g.ct, at);   // beta 0: C not read
            float v = (float)(g.alpha * s + c);
            store_from_f32(C, g.ct, at, g.epi ? lt_epilogue(g, i, j, v) : v);
        }
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext{CUBLAS_DEFAULT_MATH, (cudaStream_t)0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { LOCK; flush(); delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    check_stream(s, "cublasSetStream");
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS"
           : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "cuBLAS error (emulated)";
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t cmp,
                            cublasGemmAlgo_t) {
    LOCK;
    const char *what = "cublasGemmEx";
    check_handle(h, what);
    check_host_scalar(what, alpha);
    check_host_scalar(what, beta);
    Gemm g{ta, tb, m, n, k, lda, ldb, ldc, *(const float *)alpha, *(const float *)beta, EXACT, at, bt, ct};
    if (!types_of(what, h, at, bt, ct, cmp, false, &g.r)) return CUBLAS_STATUS_NOT_SUPPORTED;
    check_ld(what, g);
    enqueue([=] { gemm_run(what, g, A, B, C); });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t cmp, cublasGemmAlgo_t) {
    LOCK;
    const char *what = "cublasGemmStridedBatchedEx";
    check_handle(h, what);
    check_host_scalar(what, alpha);
    check_host_scalar(what, beta);
    Gemm g{ta, tb, m, n, k, lda, ldb, ldc, *(const float *)alpha, *(const float *)beta, EXACT, at, bt, ct};
    if (!types_of(what, h, at, bt, ct, cmp, false, &g.r)) return CUBLAS_STATUS_NOT_SUPPORTED;
    check_ld(what, g);
    if (batch < 0) die("%s: batch %d", what, batch);
    size_t ea = type_size(at), eb = type_size(bt), ec = type_size(ct);
    enqueue([=] {
        for (int i = 0; i < batch; i++)
            gemm_run(what, g, (const char *)A + i * sa * ea, (const char *)B + i * sb * eb, (char *)C + i * sc * ec);
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t ta[], const cublasOperation_t tb[],
                                          const int m[], const int n[], const int k[], const void *alpha,
                                          const void *const A[], cudaDataType at, const int lda[],
                                          const void *const B[], cudaDataType bt, const int ldb[], const void *beta,
                                          void *const C[], cudaDataType ct, const int ldc[], int groups,
                                          const int size[], cublasComputeType_t cmp) {
    LOCK;
    const char *what = "cublasGemmGroupedBatchedEx";
    check_handle(h, what);
    Rounding r;
    if (!types_of(what, h, at, bt, ct, cmp, true, &r)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const void *host_arrays[] = {ta, tb, m, n, k, alpha, lda, ldb, beta, ldc, size};
    for (const void *p : host_arrays)
        if (!p || is_dev(p)) die("%s: the per-group arrays must be host memory", what);
    // per problem: its group's parameters, read now (host arrays); the pointer arrays are
    // device memory, read when the GEMM runs
    std::vector<Gemm> probs;
    for (int gi = 0; gi < groups; gi++) {
        Gemm g{ta[gi], tb[gi], m[gi], n[gi], k[gi], lda[gi], ldb[gi], ldc[gi], ((const float *)alpha)[gi],
               ((const float *)beta)[gi], r, at, bt, ct};
        check_ld(what, g);
        if (size[gi] < 0) die("%s: group %d has size %d", what, gi, size[gi]);
        probs.insert(probs.end(), (size_t)size[gi], g);
    }
    size_t total = probs.size();
    check_span(A, total * sizeof(void *), "cublasGemmGroupedBatchedEx A array");
    check_span(B, total * sizeof(void *), "cublasGemmGroupedBatchedEx B array");
    check_span(C, total * sizeof(void *), "cublasGemmGroupedBatchedEx C array");
    enqueue([=] {
        for (size_t i = 0; i < total; i++) gemm_run(what, probs[i], A[i], B[i], C[i]);
    });
    return CUBLAS_STATUS_SUCCESS;
}

// =======================================================================================
// cuBLASLt: the matmul descriptor, layouts, preference, heuristic and cublasLtMatmul that
// src/cuda/gemm_lt.cu uses, on the GEMM above. The descriptors live in the library's opaque
// structs. The heuristic's algorithm remembers what it was asked for: cublasLtMatmul takes it for
// another shape of the same transposes and types (as the library does), and answers
// CUBLAS_STATUS_NOT_SUPPORTED when an operand is less aligned than the algorithm was promised
// (the caller's fallback then runs). D must be C. Layouts that do not make a product stop the run.
// Asked for several, the heuristic answers three algorithms: the first and the third compute as
// above, the second as a split-K kernel would (the halves of k summed apart, so other bits); on
// the events' clock the second runs fastest, the third next (each adds 10, 30 or 20 ms to it),
// so that a tuner which keeps a faster algorithm without checking its result takes the wrong one.
// Epilogues: none, or GELU's with its input kept (GELU_AUX, GELU_AUX_BIAS with a bf16 bias) and
// its gradient (DGELU), on a bf16 D with a bf16 matrix beside it (lt_epilogue_ok says what else);
// the heuristic finds algorithms for one epilogue, and cublasLtMatmul stops a run that calls an
// algorithm with another.

struct cublasLtContext { int alive; };
namespace {
constexpr uint32_t kLtDesc = 0x4c744431, kLtLayout = 0x4c744c31, kLtPref = 0x4c745031, kLtAlgo = 0x4c744131;
struct LtDesc {
    uint32_t magic; cublasComputeType_t cmp; cudaDataType scale; cublasOperation_t ta, tb;
    uint32_t epi; const void *bias; const void *aux; int64_t auxld; cudaDataType biast, auxt;   // the epilogue's
};
struct LtLayout { uint32_t magic; cudaDataType t; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; };
struct LtPref { uint32_t magic; uint64_t ws; uint32_t align[4]; };
struct LtAlgo { uint32_t magic; cublasOperation_t ta, tb; cudaDataType at, bt, ct; uint32_t align[4]; int idx; uint32_t epi; };
constexpr int kLtAlgos = 3;
constexpr cudaDataType kLtAsD = (cudaDataType)-1;   // a bias or epilogue type not set: D's (the library's default)
constexpr double kLtMs[kLtAlgos] = {30, 10, 20};   // what each algorithm adds to the events' clock
static_assert(sizeof(LtDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc");
static_assert(sizeof(LtLayout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout");
static_assert(sizeof(LtPref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference");
static_assert(sizeof(LtAlgo) <= sizeof(cublasLtMatmulAlgo_t), "algo");

// the emulation's struct T kept in (or read from) the library's opaque struct O
template <class T, class O> T lt_get(const O *o, uint32_t magic, const char *what) {
    if (!o) die("%s: NULL descriptor", what);
    T t;
    memcpy(&t, o, sizeof t);
    if (t.magic != magic) die("%s: a descriptor that was never created (or of another kind)", what);
    return t;
}
template <class T, class O> void lt_put(O *o, const T &t) { memcpy(o, &t, sizeof t); }

template <class V> void lt_attr(const void *buf, size_t n, V *v, const char *what) {
    if (n != sizeof(V)) die("%s: attribute of %zu bytes where %zu are expected", what, n, sizeof(V));
    memcpy(v, buf, n);
}

// the product the layouts describe: D[m,n] = op(A)[m,k]·op(B)[k,n], or a stop
Gemm lt_gemm(const char *what, const LtDesc &d, const LtLayout &a, const LtLayout &b, const LtLayout &c,
             float alpha, float beta) {
    uint64_t am = d.ta == CUBLAS_OP_N ? a.rows : a.cols, ak = d.ta == CUBLAS_OP_N ? a.cols : a.rows;
    uint64_t bk = d.tb == CUBLAS_OP_N ? b.rows : b.cols, bn = d.tb == CUBLAS_OP_N ? b.cols : b.rows;
    if (am != c.rows || bn != c.cols || ak != bk)
        die("%s: op(A) %llux%llu, op(B) %llux%llu and C %llux%llu do not make a product", what,
            (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
            (unsigned long long)c.rows, (unsigned long long)c.cols);
    if (a.batch != c.batch || b.batch != c.batch) die("%s: batch counts %d, %d, %d differ", what, a.batch, b.batch, c.batch);
    Gemm g{d.ta, d.tb, (int)c.rows, (int)c.cols, (int)ak, (int)a.ld, (int)b.ld, (int)c.ld, alpha, beta, EXACT, a.t, b.t, c.t};
    check_ld(what, g);
    return g;
}

bool lt_types(const char *what, const LtDesc &d, const LtLayout &a, const LtLayout &b, const LtLayout &c) {
    if (d.scale != CUDA_R_32F) die("%s: scale type %d (ted's GEMMs scale in fp32)", what, (int)d.scale);
    cublasContext h{CUBLAS_DEFAULT_MATH, 0};
    Rounding r;
    return types_of(what, &h, a.t, b.t, c.t, d.cmp, false, &r);
}

// An epilogue the library has kernels for (the emulation's: none, or GELU's with its bf16 input
// kept, GELU_AUX_BIAS with a bf16 bias, and DGELU), on a bf16 D, its matrix's ld a multiple of
// 8 and at least D's rows, one problem; else (a line saying why) the heuristic answers none.
bool lt_epilogue_ok(const char *what, const LtDesc &d, const LtLayout &c) {
    if (d.epi == CUBLASLT_EPILOGUE_DEFAULT) return true;
    const char *no = NULL;
    cudaDataType auxt = d.auxt == kLtAsD ? c.t : d.auxt, biast = d.biast == kLtAsD ? c.t : d.biast;
    if (d.epi != CUBLASLT_EPILOGUE_GELU_AUX && d.epi != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
        d.epi != CUBLASLT_EPILOGUE_DGELU)
        no = "an epilogue the emulation does not have";
    else if (c.t != CUDA_R_16BF || c.batch != 1) no = "D is not one bf16 matrix";
    else if (!d.aux || auxt != CUDA_R_16BF || d.auxld % 8 || d.auxld < (int64_t)c.rows)
        no = "its matrix is not bf16 with an ld a multiple of 8, at least D's rows";
    else if ((d.epi & CUBLASLT_EPILOGUE_BIAS) && (!d.bias || biast != CUDA_R_16BF)) no = "no bf16 bias";
    if (no) fprintf(stderr, "emu: %s: epilogue %u refused: %s\n", what, d.epi, no);
    return !no;
}

uint32_t lt_align(const void *p, int64_t stride, size_t elem, int batch) {
    uintptr_t x = (uintptr_t)p | 256;
    if (batch > 1) x |= (uintptr_t)(stride * (int64_t)elem) | 256;
    return (uint32_t)(x & -x);
}
}   // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new cublasLtContext{1}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { LOCK; flush(); delete h; return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t cmp, cudaDataType_t scale) {
    *d = new cublasLtMatmulDescOpaque_t();
    lt_put(*d, LtDesc{kLtDesc, cmp, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0,
                      kLtAsD, kLtAsD});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t n) {
    const char *what = "cublasLtMatmulDescSetAttribute";
    LtDesc x = lt_get<LtDesc>(d, kLtDesc, what);
    if (attr == CUBLASLT_MATMUL_DESC_TRANSA) lt_attr(buf, n, &x.ta, what);
    else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) lt_attr(buf, n, &x.tb, what);
    else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE) lt_attr(buf, n, &x.epi, what);
    else if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER) lt_attr(buf, n, &x.bias, what);
    else if (attr == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) lt_attr(buf, n, &x.biast, what);
    else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER) lt_attr(buf, n, &x.aux, what);
    else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) lt_attr(buf, n, &x.auxld, what);
    else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE) lt_attr(buf, n, &x.auxt, what);
    else die("%s: attribute %d is not emulated", what, (int)attr);
    lt_put(d, x);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    *l = new cublasLtMatrixLayoutOpaque_t();
    lt_put(*l, LtLayout{kLtLayout, t, rows, cols, ld, 1, 0});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t n) {
    const char *what = "cublasLtMatrixLayoutSetAttribute";
    LtLayout x = lt_get<LtLayout>(l, kLtLayout, what);
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) lt_attr(buf, n, &x.batch, what);
    else if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) lt_attr(buf, n, &x.stride, what);
    else die("%s: attribute %d is not emulated", what, (int)attr);
    if (x.batch < 1) die("%s: batch count %d", what, x.batch);
    lt_put(l, x);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new cublasLtMatmulPreferenceOpaque_t();
    lt_put(*p, LtPref{kLtPref, 0, {256, 256, 256, 256}});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t n) {
    const char *what = "cublasLtMatmulPreferenceSetAttribute";
    LtPref x = lt_get<LtPref>(p, kLtPref, what);
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) lt_attr(buf, n, &x.ws, what);
    else if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        lt_attr(buf, n, &x.align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], what);
    else die("%s: attribute %d is not emulated", what, (int)attr);
    lt_put(p, x);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int want,
                                              cublasLtMatmulHeuristicResult_t res[], int *got) {
    const char *what = "cublasLtMatmulAlgoGetHeuristic";
    if (!h || !h->alive) die("%s: NULL cuBLASLt handle", what);
    LtDesc x = lt_get<LtDesc>(d, kLtDesc, what);
    LtLayout la = lt_get<LtLayout>(a, kLtLayout, what), lb = lt_get<LtLayout>(b, kLtLayout, what);
    LtLayout lc = lt_get<LtLayout>(c, kLtLayout, what), ld = lt_get<LtLayout>(dd, kLtLayout, what);
    LtPref pr = lt_get<LtPref>(p, kLtPref, what);
    if (memcmp(&lc, &ld, sizeof lc)) die("%s: D's layout differs from C's (not emulated)", what);
    lt_gemm(what, x, la, lb, lc, 1, 0);
    if (want < 1 || !res || !got) die("%s: asked for %d results", what, want);
    *got = 0;
    if (!lt_types(what, x, la, lb, lc) || !lt_epilogue_ok(what, x, lc)) return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < want && i < kLtAlgos; i++) {
        memset(&res[i], 0, sizeof res[i]);
        LtAlgo al{kLtAlgo, x.ta, x.tb, la.t, lb.t, lc.t, {pr.align[0], pr.align[1], pr.align[2], pr.align[3]}, i,
                  x.epi};
        lt_put(&res[i].algo, al);
        res[i].state = CUBLAS_STATUS_SUCCESS;
        res[i].wavesCount = 1;
        *got = i + 1;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s) {
    LOCK;
    const char *what = "cublasLtMatmul";
    if (!h || !h->alive) die("%s: NULL cuBLASLt handle", what);
    check_stream(s, what);
    check_host_scalar(what, alpha);
    check_host_scalar(what, beta);
    LtDesc x = lt_get<LtDesc>(d, kLtDesc, what);
    LtLayout la = lt_get<LtLayout>(a, kLtLayout, what), lb = lt_get<LtLayout>(b, kLtLayout, what);
    LtLayout lc = lt_get<LtLayout>(c, kLtLayout, what), ld = lt_get<LtLayout>(dd, kLtLayout, what);
    if (C != D || memcmp(&lc, &ld, sizeof lc)) die("%s: D must be C, with C's layout (not emulated otherwise)", what);
    if (!algo) die("%s: no algorithm (ted always passes the heuristic's)", what);
    LtAlgo al = lt_get<LtAlgo>(algo, kLtAlgo, what);
    Gemm g = lt_gemm(what, x, la, lb, lc, *(const float *)alpha, *(const float *)beta);
    if (!lt_types(what, x, la, lb, lc) || !lt_epilogue_ok(what, x, lc)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (al.idx < 0 || al.idx >= kLtAlgos) die("%s: an algorithm the heuristic never gave", what);
    g.split = al.idx == 1;
    if (al.ta != x.ta || al.tb != x.tb || al.at != la.t || al.bt != lb.t || al.ct != lc.t)
        die("%s: an algorithm found for other transposes or types", what);
    if (al.epi != x.epi) die("%s: an algorithm found for another epilogue (%u, not %u)", what, al.epi, x.epi);
    if (x.epi != CUBLASLT_EPILOGUE_DEFAULT) {
        if (*(const float *)beta != 0.0f) die("%s: an epilogue with beta %g (ted's take beta 0)", what, *(const float *)beta);
        g.epi = (int)x.epi;
        g.bias = x.bias;
        g.aux = (void *)x.aux;
        g.auxld = x.auxld;
    }
    if (lt_align(B, lb.stride, type_size(lb.t), lb.batch) < al.align[1] ||
        lt_align(A, la.stride, type_size(la.t), la.batch) < al.align[0] ||
        lt_align(C, lc.stride, type_size(lc.t), lc.batch) < al.align[2])
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ws_bytes && !is_dev(ws)) die("%s: the workspace is not device memory", what);
    int batch = lc.batch;
    size_t ea = type_size(la.t), eb = type_size(lb.t), ec = type_size(lc.t);
    int64_t sa = la.stride, sb = lb.stride, sc = lc.stride;
    double ms = kLtMs[al.idx];
    enqueue([=] {
        for (int i = 0; i < batch; i++)
            gemm_run(what, g, (const char *)A + i * sa * ea, (const char *)B + i * sb * eb, (char *)D + i * sc * ec);
        events_clock_ms += ms;
    });
    return CUBLAS_STATUS_SUCCESS;
}

// =======================================================================================
// dynamic shared memory, async copies, warp collectives (emu.h's last section)

static constexpr size_t kSharedDefault = 48 << 10, kSharedOptin = 227 << 10;   // per block (sm_90)
static std::map<const void *, int> max_dynamic_shared;   // kernel → its attribute
static unsigned char *dyn;                                // this block's buffer (R.shmem bytes)

void emu_fail(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die("kernel %s: %s", R.kernel, msg);
}

cudaError_t cudaFuncSetAttribute(const void *fn, cudaFuncAttribute attr, int value) {
    LOCK;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) die("cudaFuncSetAttribute: attribute %d is not emulated", (int)attr);
    if (!fn) return cudaErrorInvalidDeviceFunction;
    if (value < 0 || (size_t)value > kSharedOptin) return cudaErrorInvalidValue;
    max_dynamic_shared[fn] = value;
    return cudaSuccess;
}

void emu_enqueue_launch_dynamic(const char *name, const void *fn, bool sync, dim3 g, dim3 b, size_t shmem,
                                cudaStream_t s, EmuKernel *k) {
    LOCK;
    check_launch(name, g, b, s);
    auto it = max_dynamic_shared.find(fn);
    size_t limit = it == max_dynamic_shared.end() ? kSharedDefault : (size_t)it->second;
    if (shmem > limit)
        die("kernel %s: %zu bytes of dynamic shared memory, over its limit of %zu (48 KB unless raised by "
            "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), at most 227 KB)", name, shmem, limit);
    std::shared_ptr<EmuKernel> kp(k);
    enqueue([name, fn, sync, g, b, shmem, kp] { run_launch(name, sync, g, b, kp.get(), fn, shmem); });
}

// A block's buffer: 128-byte aligned, ending at a PROT_NONE page (an overrun by 128 bytes or more
// faults), NaN bytes at the start of every block.
static void dynamic_shared_block(void) {
    dyn = NULL;
    if (!R.shmem) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), need = (R.shmem + 127) / 128 * 128;
    size_t map = (need + page - 1) / page * page + page;
    if (map > dyn_map) {
        if (dyn_base) munmap(dyn_base, dyn_map);
        void *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) die("no memory for %zu bytes of dynamic shared memory", R.shmem);
        dyn_base = (unsigned char *)m;
        dyn_map = map;
        mprotect(dyn_base + map - page, page, PROT_NONE);
    }
    dyn = dyn_base + dyn_map - page - need;
    memset(dyn, 0xFF, need);
}

void *emu_dynamic_shared(void) { return dyn; }

void emu_check_tile(const char *what, const void *p, size_t bytes) {
    const unsigned char *a = (const unsigned char *)p;
    if (dyn_base && a >= dyn_base && a < dyn_base + dyn_map) {
        if (!dyn || a < dyn || a + bytes > dyn + R.shmem)
            emu_fail("%s: %zu bytes at %p lie outside the %zu bytes of dynamic shared memory", what, bytes, p, R.shmem);
        return;
    }
    if (in_arena(p)) check_span(p, bytes, what);   // else static __shared__: not checked
}

// ---- cp.async: per thread, the copies not yet committed and the commit groups in order
struct AsyncCopy { void *dst; const void *src; size_t n, zfill; };
struct ThreadCopies { std::vector<AsyncCopy> open; std::vector<std::vector<AsyncCopy>> groups; };
static std::vector<ThreadCopies> copies;

static void copies_launch(unsigned threads) { copies.assign(threads, ThreadCopies()); }
static void copies_run(const std::vector<AsyncCopy> &g) {
    for (const AsyncCopy &c : g) {
        memcpy(c.dst, c.src, c.n - c.zfill);
        memset((char *)c.dst + c.n - c.zfill, 0, c.zfill);
    }
}
// what a thread leaves in flight completes
static void copies_thread_exit(unsigned t) {
    ThreadCopies &c = copies[t];
    for (const auto &g : c.groups) copies_run(g);
    copies_run(c.open);
    c = ThreadCopies();
}

void __pipeline_memcpy_async(void *dst, const void *src, size_t n, size_t zfill) {
    if (n != 4 && n != 8 && n != 16) emu_fail("__pipeline_memcpy_async of %zu bytes (4, 8 or 16)", n);
    if (zfill > n) emu_fail("__pipeline_memcpy_async: zfill %zu over the size %zu", zfill, n);
    if ((uintptr_t)dst % n || (uintptr_t)src % n)
        emu_fail("__pipeline_memcpy_async of %zu bytes from %p to %p: not aligned to its size", n, src, dst);
    if (in_arena(dst)) emu_fail("__pipeline_memcpy_async: the destination %p is device memory, not shared", dst);
    emu_check_tile("__pipeline_memcpy_async destination", dst, n);
    if (n > zfill) check_span(src, n - zfill, "__pipeline_memcpy_async source");
    copies[R.cur].open.push_back(AsyncCopy{dst, src, n, zfill});
}
void __pipeline_commit(void) {
    ThreadCopies &c = copies[R.cur];
    c.groups.push_back(std::move(c.open));
    c.open.clear();
}
void __pipeline_wait_prior(size_t prior) {
    ThreadCopies &c = copies[R.cur];
    if (c.groups.size() <= prior) return;
    size_t done = c.groups.size() - prior;
    for (size_t i = 0; i < done; i++) copies_run(c.groups[i]);
    c.groups.erase(c.groups.begin(), c.groups.begin() + (long)done);
}

int emu_lane(void) { return (int)(R.cur & 31); }

void emu_warp_collective(int op, void *arg, void (*run)(void *const *args)) {
    warp_op(0xffffffffu, op, (uint64_t)(uintptr_t)arg, run);
}

// ---- mma.sync m16n8k16 bf16 and ldmatrix (emu.h): the PTX ISA's fragment layouts; lane l is
// in group g = l / 4 at place t = l % 4 of it.

enum { EMU_MMA = 40, EMU_LDSM = 41 };
struct EmuMmaArgs { float *d; const uint32_t *a, *b; };
struct EmuLdsmArgs { uint32_t *r; const void *p; int n; bool trans; };

static double bf16_half(uint32_t reg, int hi) {
    uint32_t bits = (hi ? reg >> 16 : reg & 0xffffu) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void mma_all(void *const *args) {
    double A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const EmuMmaArgs *m = (const EmuMmaArgs *)args[l];
        int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = bf16_half(m->a[0], h);
            A[g + 8][2 * t + h] = bf16_half(m->a[1], h);
            A[g][2 * t + 8 + h] = bf16_half(m->a[2], h);
            A[g + 8][2 * t + 8 + h] = bf16_half(m->a[3], h);
            B[2 * t + h][g] = bf16_half(m->b[0], h);
            B[2 * t + 8 + h][g] = bf16_half(m->b[1], h);
            C[g][2 * t + h] = m->d[h];
            C[g + 8][2 * t + h] = m->d[2 + h];
        }
    }
    for (int l = 0; l < 32; l++) {
        const EmuMmaArgs *m = (const EmuMmaArgs *)args[l];
        int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
            double s = C[r][c];
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
            m->d[i] = (float)s;
        }
    }
}

void emu_mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b) {
    EmuMmaArgs m{d, a, b};
    emu_warp_collective(EMU_MMA, &m, mma_all);
}

static void ldsm_all(void *const *args) {
    const EmuLdsmArgs *a0 = (const EmuLdsmArgs *)args[0];
    uint16_t M[4][8][8];
    for (int l = 1; l < 32; l++) {
        const EmuLdsmArgs *a = (const EmuLdsmArgs *)args[l];
        if (a->n != a0->n || a->trans != a0->trans) die("kernel %s: lanes of a warp at different ldmatrix shapes", R.kernel);
    }
    for (int j = 0; j < a0->n; j++)
        for (int i = 0; i < 8; i++) {
            const void *p = ((const EmuLdsmArgs *)args[8 * j + i])->p;
            if ((uintptr_t)p % 16) die("kernel %s: ldmatrix row address %p is not 16-byte aligned", R.kernel, p);
            emu_check_tile("ldmatrix", p, 16);
            memcpy(M[j][i], p, 16);
        }
    for (int l = 0; l < 32; l++) {
        const EmuLdsmArgs *a = (const EmuLdsmArgs *)args[l];
        int g = l / 4, t = l % 4;
        for (int j = 0; j < a0->n; j++) {
            uint16_t lo = a0->trans ? M[j][2 * t][g] : M[j][g][2 * t];
            uint16_t hi = a0->trans ? M[j][2 * t + 1][g] : M[j][g][2 * t + 1];
            a->r[j] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

void emu_ldmatrix(uint32_t *r, int n, bool trans, const void *p) {
    if (n != 1 && n != 2 && n != 4) die("kernel %s: ldmatrix of %d matrices", R.kernel, n);
    EmuLdsmArgs a{r, p, n, trans};
    emu_warp_collective(EMU_LDSM, &a, ldsm_all);
}

// =======================================================================================
// NCCL: not emulated. The emulation has one device, so ranks that share a node take comm.c's
// host-staged path; a run that still reaches NCCL stops here.

[[noreturn]] static void no_nccl(const char *what) {
    fprintf(stderr, "emu: NCCL is not emulated (%s called)\n", what);
    abort();
}
const char *ncclGetErrorString(ncclResult_t) { no_nccl("ncclGetErrorString"); }
ncclResult_t ncclGetUniqueId(ncclUniqueId *) { no_nccl("ncclGetUniqueId"); }
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) { no_nccl("ncclCommInitRank"); }
ncclResult_t ncclCommDestroy(ncclComm_t) { no_nccl("ncclCommDestroy"); }
ncclResult_t ncclGroupStart() { no_nccl("ncclGroupStart"); }
ncclResult_t ncclGroupEnd() { no_nccl("ncclGroupEnd"); }
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
    no_nccl("ncclAllReduce");
}
ncclResult_t ncclReduceScatter(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
    no_nccl("ncclReduceScatter");
}
ncclResult_t ncclAllGather(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
    no_nccl("ncclAllGather");
}
ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
    no_nccl("ncclBroadcast");
}
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { no_nccl("ncclSend"); }
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { no_nccl("ncclRecv"); }

// =======================================================================================
// at exit: the work still queued runs; red zones of the blocks still allocated; counts on
// request

static void at_exit(void) {
    if (window == 0) flush();   // not when exit() came from inside the stream
    if (arena && !dev.empty()) {
        Window w;
        for (auto &b : dev)
            if (!red_zone_intact(b.first, b.second))
                die("a kernel or copy wrote past the end of the allocation of %zu bytes at %p", b.second.bytes,
                    (void *)b.first);
    }
    const char *v = getenv("TED_EMU_STATS");
    if (v && strcmp(v, "0"))
        fprintf(stderr, "emu: %ld launches, %ld blocks (%ld as fibers, %ld switches), %ld GEMMs (%ld on fp32 operands), "
                "%ld copies, device peak %zu bytes\n", stats.launches, stats.blocks, stats.fiber_blocks, stats.switches,
                stats.gemms, stats.gemms_f32, stats.copies, stats.dev_peak);
}
