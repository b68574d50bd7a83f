// flags.c — `ted train`'s flags: one table (the flag, its kind, the field it sets, the JSON key
// it overrides, its default in words, its help) that parses the flags, prints --help and names a
// misspelt or another trainer's flag.
#include "config/tables.h"
#include "core/util.h"
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// clang-format off
const Flag config_flags[] = {
    {"--config", F_CONFIG, 0, "FILE", NULL, "none", "JSON config, read first; flags override it"},
    {"--data", F_STRING, CF(data), "FILE", NULL, "none", "training data: text (bytes) or *.bin token shards"},
    {"--steps", F_INT, CF(steps), "N", "train_steps", NULL, "optimizer steps"},
    {"--micro-batch", F_INT, CF(micro_batch), "N", "train_micro_batch_size_per_gpu", NULL, "sequences per micro-step per data-parallel rank"},
    {"--grad-accum", F_INT, CF(grad_accum), "N", "gradient_accumulation_steps", NULL, "micro-steps per step"},
    {"--train-batch-size", F_INT, CF(train_batch_size), "N", "train_batch_size", "not checked", "global batch; must equal micro-batch x grad-accum x dp"},
    {"--lr", F_FLOAT, CF(lr), "X", "optimizer.params.lr", NULL, "peak learning rate"},
    {"--min-lr", F_MIN_LR, CF(min_lr), "X", "scheduler.params.min_lr", "lr/10", "final learning rate of the cosine decay"},
    {"--warmup", F_INT, CF(warmup), "N", "scheduler.params.warmup_num_steps", NULL, "linear warm-up steps"},
    {"--weight-decay", F_FLOAT, CF(weight_decay), "X", "optimizer.params.weight_decay", NULL, "AdamW decoupled weight decay (tensors of >= 2 dims)"},
    {"--clip", F_FLOAT, CF(clip), "X", "gradient_clipping", NULL, "global gradient-norm clipping (<= 0: off)"},
    {"--seed", F_SEED, CF(seed), "N", "seed", NULL, "seed of the initial weights and of the data order"},
    {"--data-order", F_ORDER, CF(data_sequential), "ORDER", "data_order", "shuffled", "sequential or shuffled"},
    {"--log", F_STRING, CF(log), "FILE", NULL, "none", "metrics, one JSON object per line"},
    {"--save", F_STRING, CF(save), "DIR", NULL, "none", "checkpoint directory"},
    {"--save-every", F_INT, CF(save_every), "N", "save_every", "0: at the end only", "save a checkpoint every N steps"},
    {"--resume", F_STRING, CF(resume), "DIR", NULL, "none", "resume from this checkpoint"},
    {"--init-from", F_STRING, CF(init_from), "DIR", NULL, "none", "start from the weights of a ted folder or a Hugging Face GPT-2, Llama, Mixtral or Qwen2-MoE folder (fresh optimizer, step 0)"},
    {"--eval-every", F_INT, CF(eval_every), "N", "eval_every", "0: at the end only", "evaluate every N steps"},
    {"--eval-windows", F_INT, CF(eval_windows), "N", "eval_windows", "0: all", "validation windows per evaluation"},
    {"--tp", F_INT, CF(tp), "N", "tp", NULL, "tensor-parallel degree"},
    {"--ep", F_INT, CF(ep), "N", "ep", NULL, "expert-parallel degree"},
    {"--pp", F_INT, CF(pp), "N", "pp", NULL, "pipeline stages"},
    {"--pp-schedule", F_PP_SCHEDULE, CF(pp_schedule), "S", "pipeline.schedule", "1f1b", "gpipe, 1f1b or interleaved"},
    {"--pp-virtual", F_INT, CF(pp_virtual), "V", "pipeline.virtual_stages", NULL, "chunks per stage (interleaved)"},
    {"--seq-len", F_INT, CF(seq_len), "N", "seq_len", "n_positions", "tokens per training sequence"},
    {"--log-every", F_INT, CF(log_every), "N", "log_every", NULL, "progress line every N steps"},
    {"--sample-every", F_INT, CF(sample_every), "N", "sample_every", "0: never", "print a sample every N steps"},
    {"--threads", F_INT, CF(threads), "N", "threads", "OpenMP default", "OpenMP threads"},
    {"--device", F_DEVICE, CF(device), "DEV", NULL, "cpu", "cpu, or cuda: model, optimizer and collectives on this rank's GPU"},
    {"--peak-tflops", F_FLOAT, CF(peak_tflops), "X", NULL, "measured", "peak TFLOP/s per process that MFU is against"},
    {"--zero-stage", F_INT, CF(zero_stage), "N", "zero_optimization.stage", NULL, "ZeRO stage: 0 all-reduce, 1 optimizer state sharded, 2 gradients too"},
    {"--overlap-comm", F_SWITCH, CF(overlap_comm), NULL, "zero_optimization.overlap_comm", "off", "gradient reductions during the backward, parameter gathers ahead of the forward"},
    {"--tile-size", F_LONG, CF(tile_size), "N", "optimizer.tile_size", NULL, "elements per tile of the tiled optimizer (0: off)"},
    {"--vocab-size", F_INT, CF(model.vocab_size), "N", "model.vocab_size", NULL, "vocabulary size V"},
    {"--n-positions", F_INT, CF(model.n_positions), "N", "model.n_positions", NULL, "maximum sequence length"},
    {"--n-embd", F_INT, CF(model.n_embd), "N", "model.n_embd", NULL, "model width d"},
    {"--n-layer", F_INT, CF(model.n_layer), "N", "model.n_layer", NULL, "transformer blocks L"},
    {"--n-head", F_INT, CF(model.n_head), "N", "model.n_head", NULL, "attention heads"},
    {"--n-inner", F_INT, CF(model.n_inner), "N", "model.n_inner", "4*n_embd", "FFN hidden size"},
    {"--num-experts", F_INT, CF(model.num_experts), "N", "moe.num_experts", NULL, "experts per MoE block (1: dense)"},
    {"--top-k", F_INT, CF(model.top_k), "N", "moe.top_k", NULL, "experts chosen per token"},
    {"--moe-every", F_INT, CF(model.moe_every), "N", "moe.moe_every", NULL, "block i is MoE when (i+1) % N == 0"},
    {"--capacity-factor", F_FLOAT, CF(model.capacity_factor), "X", "moe.capacity_factor", NULL, "expert capacity factor (<= 0: dropless)"},
    {"--min-capacity", F_INT, CF(model.min_capacity), "N", "moe.min_capacity", NULL, "minimum expert capacity"},
    {"--group-size", F_INT, CF(model.group_size), "N", "moe.group_size", NULL, "sequences per routing group"},
    {"--aux-coef", F_FLOAT, CF(model.aux_coef), "X", "moe.aux_coef", NULL, "load-balancing loss coefficient"},
    {"--z-coef", F_FLOAT, CF(model.z_coef), "X", "moe.z_coef", NULL, "router z-loss coefficient"},
    {"--router", F_ROUTER, CF(model.router), "NAME", "moe.router", "topk", "topk, noisy_topk, switch, gshard, expert_choice or mixtral"},
    {"--use-rts", F_SWITCH, CF(model.use_rts), NULL, "moe.use_rts", "off", "random token selection for capacity slots"},
    {"--jitter-eps", F_FLOAT, CF(model.jitter_eps), "X", "moe.jitter_eps", NULL, "switch: router input jitter U(1-X, 1+X) in training"},
    {"--importance-coef", F_FLOAT, CF(model.importance_coef), "X", "moe.importance_coef", NULL, "noisy_topk: CV(importance)^2 loss coefficient"},
    {"--load-coef", F_FLOAT, CF(model.load_coef), "X", "moe.load_coef", NULL, "noisy_topk: CV(load)^2 loss coefficient"},
    {"--bias-update-rate", F_FLOAT, CF(model.bias_update_rate), "X", "moe.bias_update_rate", "0: off", "aux-loss-free balancing: bias step per optimizer step"},
    {"--num-groups", F_INT, CF(model.num_groups), "N", "moe.num_groups", NULL, "group-limited routing: expert groups"},
    {"--topk-groups", F_INT, CF(model.topk_groups), "N", "moe.topk_groups", NULL, "group-limited routing: groups a token may use"},
    {"--shared-experts", F_INT, CF(model.shared_experts), "N", "moe.shared_experts", NULL, "always-on expert of N*expert_inner hidden units"},
    {"--topk-renorm", F_INT, CF(model.topk_renorm), "0|1", "moe.topk_renorm", "1", "0: the k gates are the chosen probabilities, unrenormalised (topk, mixtral)"},
    {"--shared-expert-gate", F_SWITCH, CF(model.shared_expert_gate), NULL, "moe.shared_expert_gate", "off", "scale the shared expert by sigmoid(x.w) (Qwen2-MoE)"},
    {"--expert-inner", F_INT, CF(model.expert_inner), "N", "moe.expert_inner", "n_inner", "expert hidden size f_e"},
    {"--arch", F_ARCH, CF(model.arch), "A", "model.arch", "gpt2", "block family: gpt2 or llama (docs/llama.md)"},
    {"--n-kv-head", F_INT, CF(model.n_kv_head), "N", "model.n_kv_head", "n_head", "llama: key/value heads (grouped-query attention)"},
    {"--rope-theta", F_FLOAT, CF(model.rope_theta), "X", "model.rope_theta", NULL, "llama: rotary embedding base"},
    {"--qkv-bias", F_SWITCH, CF(model.qkv_bias), NULL, "model.qkv_bias", "off", "llama: biases on q, k, v (Qwen2)"},
    {"--rms-norm-eps", F_FLOAT, CF(model.rms_norm_eps), "X", "model.rms_norm_eps", NULL, "llama: RMSNorm eps"},
    {"--expert-type", F_EXPERT_TYPE, CF(model.expert_type), "KIND", "moe.expert_type", "gelu", "expert kind: gelu or swiglu"},
    {"--bf16", F_SWITCH, CF(bf16), NULL, "bf16.enabled", "off", "bf16 mixed precision"},
    {"--fp16", F_SWITCH, CF(fp16), NULL, "fp16.enabled", "off", "fp16 mixed precision with loss scaling"},
    {"--activation-checkpointing", F_SWITCH, CF(activation_checkpointing), NULL, "activation_checkpointing.enabled", "off", "recompute blocks in backward"},
    {"--dtd", F_SWITCH, CF(dtd), NULL, "dtd", "off", "duplicate token dropping"},
    {"--cac", F_SWITCH, CF(cac), NULL, "cac", "off", "communication-aware checkpointing"},
    {"--overlap-degree", F_INT, CF(overlap_degree), "N", "moe.overlap_degree", "1", "expert-parallel exchange in N chunks, overlapped with the experts"},
    {"--progress-thread", F_SWITCH, CF(progress_thread), NULL, "moe.progress_thread", "off", "a thread moves the chunks' messages while the experts run"},
    {"--keep-last", F_INT, CF(keep_last), "N", NULL, "0: all", "keep only the N newest checkpoints in --save"},
    {"--overwrite", F_SWITCH, CF(overwrite), NULL, NULL, "off", "take over a --save folder or --log file of another run"},
    {"--watchdog", F_INT, CF(watchdog), "SECONDS", NULL, NULL, "a collective not done in this time ends the job, naming it (0: off)"},
    {"--tensorboard-dir", F_STRING, CF(tensorboard_dir), "DIR", NULL, "none", "TensorBoard event files of the run's metrics in DIR (Megatron's flag)"},
    {"--log-tensors", F_SWITCH, CF(log_tensors), NULL, NULL, "off", "log each tensor's gradient norm and each MoE block's tokens per expert"},
    {"--dry-run", F_SWITCH, CF(dry_run), NULL, NULL, "off", "check the config, data and layout and plan the memory, then exit without training or writing"},
    {"--ranks", F_INT, CF(dry_run_ranks), "N", NULL, "0: the processes it runs on", "with --dry-run: the processes (mpirun -np N) to check the layout for"},
    {"--debug-expert-grad-scale", F_FLOAT, CF(debug_expert_grad_scale), "X", NULL, NULL, "debugging: multiply expert gradients by X (a deliberate bug)"},
};
// clang-format on
const int config_nflags = sizeof config_flags / sizeof config_flags[0];

static const Flag *find_flag(const char *name, size_t len) {
    for (int i = 0; i < config_nflags; i++)
        if (strlen(config_flags[i].flag) == len && strncmp(config_flags[i].flag, name, len) == 0)
            return &config_flags[i];
    return NULL;
}

// Strict number parsing: the whole string, no leading space. 0, -1 when not an integer,
// -2 when out of [lo, hi].
static int parse_long(const char *s, long lo, long hi, long *out) {
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end) return -1;
    if (errno == ERANGE || v < lo || v > hi) return -2;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float *out) {
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || fabs(v) > FLT_MAX) return -1;
    *out = (float)v;
    return 0;
}

static int parse_seed(const char *s, uint64_t *out) {
    if (!isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE) return -1;
    *out = v;
    return 0;
}

static int bad_value(const Flag *f, const char *want, const char *v) {
    ted_error("%s: expected %s, got \"%s\"", f->flag, want, v);
    return -1;
}

// The flags whose value is one of a few names: the device, router, block family, expert kind,
// data order, pipeline schedule.
static int apply_flag_name(Config *c, const Flag *f, const char *v) {
    int i = -1;
    const char *want = "";
    switch (f->kind) {
    case F_DEVICE:
        i = !strcmp(v, "cpu") ? DEV_CPU : !strcmp(v, "cuda") ? DEV_CUDA : -1;
        want = "cpu or cuda";
        break;
    case F_ROUTER:
        i = config_name_index(router_names, ROUTER_KINDS, v);
        want = "topk, noisy_topk, switch, gshard, expert_choice or mixtral";
        break;
    case F_ARCH:
        i = config_name_index(arch_names, ARCH_KINDS, v);
        want = "gpt2 or llama";
        break;
    case F_EXPERT_TYPE:
        i = config_name_index(expert_type_names, EXPERT_KINDS, v);
        want = "gelu or swiglu";
        break;
    case F_ORDER:
        i = !strcmp(v, "sequential") ? 1 : !strcmp(v, "shuffled") ? 0 : -1;
        want = "sequential or shuffled";
        break;
    case F_PP_SCHEDULE:
        i = config_pp_schedule(v);
        want = "gpipe, 1f1b or interleaved";
        break;
    default: return -1;
    }
    if (i < 0) return bad_value(f, want, v);
    *FIELD(c, f->off, int) = i;
    return 0;
}

// Stores the value of one flag.
static int apply_flag(Config *c, const Flag *f, const char *v) {
    long l;
    int rc;
    switch (f->kind) {
    case F_INT:
        if ((rc = parse_long(v, INT_MIN, INT_MAX, &l)) != 0)
            return bad_value(f, rc == -2 ? "an integer in [-2^31, 2^31-1]" : "an integer", v);
        *FIELD(c, f->off, int) = (int)l;
        return 0;
    case F_LONG:
        if (parse_long(v, 0, LONG_MAX, &l) != 0) return bad_value(f, "a non-negative integer", v);
        *FIELD(c, f->off, long) = l;
        return 0;
    case F_FLOAT:
    case F_MIN_LR:
        if (parse_float(v, FIELD(c, f->off, float)) != 0) return bad_value(f, "a number", v);
        if (f->kind == F_MIN_LR) c->min_lr_set = 1;
        return 0;
    case F_SEED:
        if (parse_seed(v, FIELD(c, f->off, uint64_t)) != 0) return bad_value(f, "an integer between 0 and 2^64-1", v);
        return 0;
    case F_STRING:
        if (!*v) return bad_value(f, "a path", v);
        if (strlen(v) >= sizeof c->data) {
            ted_error("%s: path longer than %zu bytes", f->flag, sizeof c->data - 1);
            return -1;
        }
        strcpy(FIELD(c, f->off, char), v);
        return 0;
    case F_DEVICE:
    case F_ROUTER:
    case F_ARCH:
    case F_EXPERT_TYPE:
    case F_ORDER:
    case F_PP_SCHEDULE: return apply_flag_name(c, f, v);
    case F_CONFIG: return *v ? 0 : bad_value(f, "a file", v);
    case F_SWITCH: *FIELD(c, f->off, int) = 1; return 0;
    }
    return -1;
}

// Megatron-LM's and nanoGPT's names for ted's flags (nanoGPT's with "_" also match by the rule
// that "_" reads as "-").
// clang-format off
static const char *const foreign_flags[][3] = {
    {"--num-layers", "--n-layer", "Megatron"}, {"--hidden-size", "--n-embd", "Megatron"},
    {"--num-attention-heads", "--n-head", "Megatron"}, {"--ffn-hidden-size", "--n-inner", "Megatron"},
    {"--seq-length", "--seq-len", "Megatron"}, {"--max-position-embeddings", "--n-positions", "Megatron"},
    {"--tensor-model-parallel-size", "--tp", "Megatron"}, {"--pipeline-model-parallel-size", "--pp", "Megatron"},
    {"--expert-model-parallel-size", "--ep", "Megatron"}, {"--virtual-pipeline-model-parallel-size", "--pp-virtual", "Megatron"},
    {"--micro-batch-size", "--micro-batch", "Megatron"}, {"--global-batch-size", "--train-batch-size", "Megatron"},
    {"--train-iters", "--steps", "Megatron"}, {"--lr-warmup-iters", "--warmup", "Megatron"},
    {"--clip-grad", "--clip", "Megatron"}, {"--save-interval", "--save-every", "Megatron"},
    {"--eval-interval", "--eval-every", "Megatron and nanoGPT"}, {"--log-interval", "--log-every", "Megatron and nanoGPT"},
    {"--eval-iters", "--eval-windows", "Megatron and nanoGPT"},
    {"--load", "--resume", "Megatron"}, {"--data-path", "--data", "Megatron"}, {"--moe-router-topk", "--top-k", "Megatron"},
    {"--moe-aux-loss-coeff", "--aux-coef", "Megatron"}, {"--moe-z-loss-coeff", "--z-coef", "Megatron"},
    {"--recompute-activations", "--activation-checkpointing", "Megatron"},
    {"--block-size", "--seq-len", "nanoGPT"}, {"--batch-size", "--micro-batch", "nanoGPT"},
    {"--gradient-accumulation-steps", "--grad-accum", "nanoGPT"}, {"--max-iters", "--steps", "nanoGPT"},
    {"--learning-rate", "--lr", "nanoGPT"}, {"--warmup-iters", "--warmup", "nanoGPT"}, {"--grad-clip", "--clip", "nanoGPT"},
    {"--out-dir", "--save", "nanoGPT"},
};
// clang-format on

// The line for an unknown flag: another trainer's name mapped, "_" read as "-", or the nearest flag.
static void unknown_flag(const char *arg, size_t len) {
    char name[80];
    snprintf(name, sizeof name, "%.*s", (int)(len < 79 ? len : 79), arg);
    for (char *p = name + 2; *p; p++)
        if (*p == '_') *p = '-';
    for (size_t i = 0; i < sizeof foreign_flags / sizeof foreign_flags[0]; i++)
        if (!strcmp(foreign_flags[i][0], name)) {
            ted_error("unknown flag %.*s: %s's name; ted's is %s (see ted train --help)", (int)len, arg,
                      foreign_flags[i][2], foreign_flags[i][1]);
            return;
        }
    const Flag *best = find_flag(name, strlen(name));
    int bd = best ? 0 : 1000;
    for (int i = 0; !best && i < config_nflags; i++) {
        int d = config_edit_distance(name + 2, config_flags[i].flag + 2);
        if (d < bd && config_near_name(name + 2, config_flags[i].flag + 2)) {
            bd = d;
            best = &config_flags[i];
        }
    }
    if (best) ted_error("unknown flag %.*s (did you mean %s? see ted train --help)", (int)len, arg, best->flag);
    else ted_error("unknown flag %.*s (see ted train --help)", (int)len, arg);
}

int config_apply_flags(Config *c, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !arg[2]) {
            ted_error("unexpected argument \"%s\"", arg);
            return -1;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const Flag *f = find_flag(arg, name_len);
        if (!f) {
            unknown_flag(arg, name_len);
            return -1;
        }
        const char *value;
        if (f->kind == F_SWITCH) {
            if (eq) {
                ted_error("%s takes no value", f->flag);
                return -1;
            }
            value = "";
        } else if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0) {
                ted_error("%s: missing value", f->flag);
                return -1;
            }
            value = argv[++i];
        }
        if (apply_flag(c, f, value) != 0) return -1;
        config_mark_flag(f);
    }
    return 0;
}

// Prints a flag's default from the defaults themselves.
static void format_default(const Flag *f, Config *d, char *buf, size_t n) {
    if (f->deflt) {
        snprintf(buf, n, "%s", f->deflt);
        return;
    }
    switch (f->kind) {
    case F_INT: snprintf(buf, n, "%d", *FIELD(d, f->off, int)); break;
    case F_LONG: snprintf(buf, n, "%ld", *FIELD(d, f->off, long)); break;
    case F_FLOAT:
    case F_MIN_LR: snprintf(buf, n, "%g", (double)*FIELD(d, f->off, float)); break;
    case F_SEED: snprintf(buf, n, "%llu", (unsigned long long)*FIELD(d, f->off, uint64_t)); break;
    default: snprintf(buf, n, "none"); break;
    }
}

void config_print_train_help(void) {
    Config d;
    config_defaults(&d);
    printf("usage: ted train [--config FILE] [--data FILE] [options]\n\n"
           "Trains a (MoE) GPT model. A JSON config (DeepSpeed-like keys, plus \"model\" and \"moe\"\n"
           "sections) is read first; each flag below overrides the JSON key shown.\n\n");
    for (int i = 0; i < config_nflags; i++) {
        const Flag *f = &config_flags[i];
        char left[64], def[64];
        snprintf(left, sizeof left, "%s%s%s", f->flag, f->metavar ? " " : "", f->metavar ? f->metavar : "");
        format_default(f, &d, def, sizeof def);
        if (f->json) printf("  %-28s %s [default %s; JSON %s]\n", left, f->help, def, f->json);
        else printf("  %-28s %s [default %s; flag only]\n", left, f->help, def);
    }
    printf(
        "\nJSON only: optimizer.params.betas [%g, %g], optimizer.params.eps %g, zero_optimization.reduce_bucket_size "
        "%ld,\n"
        "  zero_optimization.offload_optimizer.device \"none\" (or \"cpu\"), optimizer.type \"AdamW\" (or "
        "\"OneBitAdam\",\n"
        "  with optimizer.params.freeze_step %d and optimizer.params.compression \"sign\" or \"none\"),\n"
        "  scheduler.type \"WarmupCosine\" (or DeepSpeed's \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\" with "
        "their\n"
        "  params), fp16.loss_scale initial_scale_power loss_scale_window hysteresis consecutive_hysteresis\n"
        "  min_loss_scale (DeepSpeed's loss scaler), steps_per_print, wall_clock_breakdown, and the tensorboard and\n"
        "  csv_monitor sections (enabled, output_path, job_name), pipeline.layers (blocks per chunk, or \"auto\"),\n"
        "  the sparse_attention section (docs/sparse_attention.md). docs/config.md describes every key.\n",
        (double)d.beta1, (double)d.beta2, (double)d.eps, d.reduce_bucket_size, d.freeze_step);
}
