// test_config.c — the run configuration: defaults, a JSON file using every key, rejection
// of unknown keys / wrong types / malformed JSON (one error line naming the file and key),
// flags layered over JSON and their errors, every validation rule, the checkpoint
// config.json round trip, and the help text listing every flag.
#include "core/alloc.h"
#include "config/config.h"
#include "core/util.h"
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"


static char json_path[64];

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { perror(path); exit(1); }
}

// ---- capturing what a call prints on a file descriptor ----------------------------------
typedef struct { int fd, saved; char path[64]; } Capture;

static Capture capture_begin(int fd) {
    Capture c = {fd, -1, "/tmp/test_config_out_XXXXXX"};
    int t = mkstemp(c.path);
    if (t < 0) { perror("mkstemp"); exit(1); }
    fflush(fd == 1 ? stdout : stderr);
    c.saved = dup(fd);
    dup2(t, fd);
    close(t);
    return c;
}

// Restores the descriptor; returns what was printed (malloc'd).
static char *capture_end(Capture *c) {
    fflush(c->fd == 1 ? stdout : stderr);
    dup2(c->saved, c->fd);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    static const size_t cap = 1 << 16;
    char *s = calloc(1, cap);
    size_t n = f ? fread(s, 1, cap - 1, f) : 0;
    s[n] = 0;
    if (f) fclose(f);
    unlink(c->path);
    return s;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// Checks that a failed call printed exactly one line containing `want`.
// (TEST_VERBOSE=1 in the environment prints every expected error.)
static void check_one_line(const char *what, const char *err, const char *want) {
    if (getenv("TEST_VERBOSE")) fprintf(stderr, "expected error: %s", err);
    EXPECT(count_lines(err) == 1, "%s: expected one error line, got: %s", what, err);
    EXPECT(strstr(err, want) != NULL, "%s: error \"%s\" lacks \"%s\"", what, err, want);
}

// ---- JSON ---------------------------------------------------------------------------------
static int load_text(Config *c, const char *text, char **err) {
    write_text(json_path, text);
    config_defaults(c);
    Capture cap = capture_begin(2);
    int rc = config_load_json(c, json_path);
    char *e = capture_end(&cap);
    if (err) *err = e; else free(e);
    return rc;
}

static void expect_json_error(const char *text, const char *want) {
    Config c;
    char *err;
    int rc = load_text(&c, text, &err);
    EXPECT(rc == -1, "accepted: %s", text);
    if (rc == -1) {
        check_one_line(text, err, want);
        EXPECT(strstr(err, json_path) != NULL, "error does not name the file: %s", err);
    }
    free(err);
}

static void expect_json_ok(const char *text) {
    Config c;
    char *err;
    EXPECT(load_text(&c, text, &err) == 0, "rejected: %s (%s)", text, err);
    free(err);
}

static int feq(float a, float b) { return fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b)); }

static void test_defaults(void) {
    Config c;
    config_defaults(&c);
    const ModelConfig *m = &c.model;
    EXPECT(m->vocab_size == 256 && m->n_positions == 256 && m->n_embd == 256 && m->n_layer == 4 &&
           m->n_head == 4 && m->n_inner == 0 && cfg_ffn(m) == 1024, "model defaults");
    EXPECT(m->num_experts == 1 && m->top_k == 2 && m->moe_every == 2 && feq(m->capacity_factor, 1) &&
           m->min_capacity == 4 && m->group_size == 1 && feq(m->aux_coef, 0.01f) && m->z_coef == 0, "moe defaults");
    EXPECT(c.seq_len == 0 && c.micro_batch == 8 && c.grad_accum == 1 && c.steps == 1000, "batch defaults");
    EXPECT(feq(c.lr, 6e-4f) && feq(c.min_lr, 6e-5f) && !c.min_lr_set && c.warmup == 100, "lr defaults");
    EXPECT(c.min_lr == 6e-5f, "min_lr is not lr/10 as written: %.9g", (double)c.min_lr);   // prints as 6e-05
    EXPECT(feq(c.beta1, 0.9f) && feq(c.beta2, 0.95f) && feq(c.eps, 1e-8f) && feq(c.weight_decay, 0.1f) &&
           feq(c.clip, 1), "optimizer defaults");
    EXPECT(c.seed == 1337 && !c.data_sequential && c.zero_stage == 1 && !c.bf16 && !c.fp16 &&
           !c.activation_checkpointing && !c.dtd && !c.cac && c.tile_size == 1800000 && c.overlap_degree == 1,
           "misc defaults");
    EXPECT(c.tp == 1 && c.ep == 1 && c.save_every == 0 && c.eval_every == 0 && c.eval_windows == 0 &&
           c.log_every == 1 && c.sample_every == 0 && c.threads == 0, "layout/io defaults");
    EXPECT(!c.data[0] && !c.log[0] && !c.save[0] && !c.resume[0], "string defaults");
    EXPECT(config_validate(&c) == 0, "defaults do not validate");
}

static const char *full_json =
    "{\n"
    "  \"comment\": \"every key\", \"_comment\": \"again\",\n"
    "  \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 3, \"train_steps\": 77,\n"
    "  \"seq_len\": 64, \"seed\": 42, \"gradient_clipping\": 0.5, \"data_order\": \"sequential\",\n"
    "  \"eval_every\": 10, \"eval_windows\": 5, \"save_every\": 20, \"log_every\": 2, \"sample_every\": 30,\n"
    "  \"threads\": 3, \"tp\": 2, \"ep\": 4, \"dtd\": true, \"cac\": true,\n"
    "  \"optimizer\": {\"type\": \"adamw\", \"tile_size\": 4096,\n"
    "                \"params\": {\"lr\": 0.001, \"betas\": [0.8, 0.99], \"eps\": 1e-6, \"weight_decay\": 0.05}},\n"
    "  \"scheduler\": {\"type\": \"WarmupCosine\", \"params\": {\"warmup_num_steps\": 7, \"min_lr\": 0.0002}},\n"
    "  \"bf16\": {\"enabled\": false},\n"
    "  \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 16, \"loss_scale_window\": 1000,\n"
    "           \"hysteresis\": 2, \"min_loss_scale\": 1},\n"
    "  \"zero_optimization\": {\"stage\": 0},\n"
    "  \"activation_checkpointing\": {\"enabled\": true, \"partition_activations\": false,\n"
    "      \"contiguous_memory_optimization\": false, \"cpu_checkpointing\": false},\n"
    "  \"model\": {\"vocab_size\": 50257, \"n_positions\": 128, \"n_embd\": 96, \"n_layer\": 6, \"n_head\": 6,\n"
    "            \"n_inner\": 200},\n"
    "  \"moe\": {\"num_experts\": 8, \"top_k\": 1, \"moe_every\": 1, \"capacity_factor\": 1.25,\n"
    "          \"min_capacity\": 2, \"group_size\": 2, \"aux_coef\": 0.02, \"z_coef\": 0.001,\n"
    "          \"overlap_degree\": 3}\n"
    "}\n";

static void test_full_json(void) {
    Config c;
    char *err;
    EXPECT(load_text(&c, full_json, &err) == 0, "full JSON rejected: %s", err);
    free(err);
    const ModelConfig *m = &c.model;
    EXPECT(c.micro_batch == 4 && c.grad_accum == 3 && c.steps == 77 && c.seq_len == 64 && c.seed == 42,
           "top-level ints");
    EXPECT(feq(c.clip, 0.5f) && c.data_sequential == 1, "clip/data_order");
    EXPECT(c.eval_every == 10 && c.eval_windows == 5 && c.save_every == 20 && c.log_every == 2 &&
           c.sample_every == 30 && c.threads == 3 && c.tp == 2 && c.ep == 4, "io/layout keys");
    EXPECT(c.dtd == 1 && c.cac == 1 && c.tile_size == 4096 && c.overlap_degree == 3, "dtd/cac/tile_size/overlap_degree");
    EXPECT(feq(c.lr, 0.001f) && feq(c.beta1, 0.8f) && feq(c.beta2, 0.99f) && feq(c.eps, 1e-6f) &&
           feq(c.weight_decay, 0.05f), "optimizer params");
    EXPECT(c.warmup == 7 && feq(c.min_lr, 0.0002f) && c.min_lr_set, "scheduler params");
    EXPECT(c.bf16 == 0 && c.fp16 == 1 && c.zero_stage == 0 && c.activation_checkpointing == 1, "switch sections");
    EXPECT(m->vocab_size == 50257 && m->n_positions == 128 && m->n_embd == 96 && m->n_layer == 6 &&
           m->n_head == 6 && m->n_inner == 200, "model section");
    EXPECT(m->num_experts == 8 && m->top_k == 1 && m->moe_every == 1 && feq(m->capacity_factor, 1.25f) &&
           m->min_capacity == 2 && m->group_size == 2 && feq(m->aux_coef, 0.02f) && feq(m->z_coef, 0.001f),
           "moe section");
    EXPECT(config_validate(&c) == 0, "full config does not validate");
}

static void test_json_errors(void) {
    // unknown keys at every level, named by their full path
    expect_json_error("{\"foo\": 1}", "unknown key \"foo\"");
    expect_json_error("{\"optimizer\": {\"kind\": \"AdamW\"}}", "unknown key \"optimizer.kind\"");
    expect_json_error("{\"optimizer\": {\"params\": {\"momentum\": 0.9}}}", "unknown key \"optimizer.params.momentum\"");
    expect_json_error("{\"scheduler\": {\"x\": 1}}", "unknown key \"scheduler.x\"");
    expect_json_error("{\"scheduler\": {\"params\": {\"cycle_min_lr\": 1}}}", "unknown key \"scheduler.params.cycle_min_lr\"");
    expect_json_error("{\"bf16\": {\"enable\": true}}", "unknown key \"bf16.enable\"");
    expect_json_error("{\"fp16\": {\"auto_scale\": true}}", "unknown key \"fp16.auto_scale\"");
    expect_json_error("{\"zero_optimization\": {\"offload\": true}}", "unknown key \"zero_optimization.offload\"");
    // the sparse_attention section's unknown keys join the others' in one line, each with its near name
    expect_json_error("{\"sparse_attention\": {\"mode\": \"fixed\", \"blok\": 16, \"num_local_block\": 4, \"zzz\": 1}, "
                      "\"optimizr\": {}}", "4 problems: unknown key \"sparse_attention.blok\" "
                      "(did you mean \"sparse_attention.block\"?); unknown key \"sparse_attention.num_local_block\" (did you "
                      "mean \"sparse_attention.num_local_blocks\"?); unknown key \"sparse_attention.zzz\"; unknown key "
                      "\"optimizr\" (did you mean \"optimizer\"?)");
    expect_json_error("{\"sparse_attention\": {\"top_k\": 2}}", "unknown key \"sparse_attention.top_k\" (did you mean \"moe.top_k\"?)");
    expect_json_error("{\"activation_checkpointing\": {\"profile\": true}}", "unknown key \"activation_checkpointing.profile\"");
    expect_json_error("{\"model\": {\"d_model\": 64}}", "unknown key \"model.d_model\"");
    expect_json_error("{\"moe\": {\"topk\": 2}}", "unknown key \"moe.topk\"");
    expect_json_error("{\"Train_steps\": 2}", "unknown key \"Train_steps\"");

    // wrong types, named by key
    expect_json_error("{\"train_steps\": \"10\"}", "\"train_steps\" must be an integer");
    expect_json_error("{\"train_steps\": 1.5}", "\"train_steps\" must be an integer");
    expect_json_error("{\"train_steps\": 1e12}", "\"train_steps\" must be an integer");
    expect_json_error("{\"moe\": {\"top_k\": 2.5}}", "\"moe.top_k\" must be an integer");
    expect_json_error("{\"model\": {\"n_layer\": true}}", "\"model.n_layer\" must be an integer");
    expect_json_error("{\"model\": {\"n_embd\": null}}", "\"model.n_embd\"");
    expect_json_error("{\"optimizer\": {\"params\": {\"lr\": \"0.1\"}}}", "\"optimizer.params.lr\" must be a number");
    expect_json_error("{\"optimizer\": {\"params\": {\"betas\": [0.9]}}}", "\"optimizer.params.betas\"");
    expect_json_error("{\"optimizer\": {\"params\": {\"betas\": [0.9, \"x\"]}}}", "\"optimizer.params.betas\"");
    expect_json_error("{\"optimizer\": {\"params\": {\"betas\": 0.9}}}", "\"optimizer.params.betas\"");
    expect_json_error("{\"optimizer\": {\"type\": \"SGD\"}}", "\"optimizer.type\"");
    expect_json_error("{\"optimizer\": {\"tile_size\": -5}}", "\"optimizer.tile_size\"");
    expect_json_error("{\"optimizer\": []}", "\"optimizer\" must be an object");
    expect_json_error("{\"scheduler\": {\"type\": \"OneCycle\"}}", "\"scheduler.type\"");
    expect_json_error("{\"scheduler\": {\"params\": {\"min_lr\": \"small\"}}}", "\"scheduler.params.min_lr\"");
    expect_json_error("{\"bf16\": {\"enabled\": 1}}", "\"bf16.enabled\" must be true or false");
    expect_json_error("{\"fp16\": {\"loss_scale\": \"dynamic\"}}", "\"fp16.loss_scale\"");
    expect_json_error("{\"fp16\": {\"hysteresis\": 1.5}}", "\"fp16.hysteresis\"");
    expect_json_error("{\"activation_checkpointing\": {\"cpu_checkpointing\": 0}}", "\"activation_checkpointing.cpu_checkpointing\"");
    expect_json_error("{\"zero_optimization\": {\"stage\": \"1\"}}", "\"zero_optimization.stage\"");
    expect_json_error("{\"data_order\": \"random\"}", "\"data_order\"");
    expect_json_error("{\"data_order\": 1}", "\"data_order\"");
    expect_json_error("{\"seed\": -1}", "\"seed\"");
    expect_json_error("{\"dtd\": \"yes\"}", "\"dtd\"");
    expect_json_error("{\"comment\": 5}", "\"comment\" must be a string");
    expect_json_error("{\"model\": 3}", "\"model\" must be an object");
    expect_json_error("{\"moe\": {\"capacity_factor\": 1e300}}", "\"moe.capacity_factor\" must be a number");

    // malformed JSON, named by file and roughly where
    expect_json_error("{\"train_steps\": 1,,}", "malformed JSON near line 1");
    expect_json_error("{\n  \"train_steps\": 1,\n  \"seed\": }\n", "malformed JSON near line 3");
    expect_json_error("{\"train_steps\": 1", "malformed JSON");
    expect_json_error("{} {}", "malformed JSON");
    expect_json_error("", "malformed JSON");
    expect_json_error("[1, 2]", "must be a JSON object");
    expect_json_error("\"text\"", "must be a JSON object");

    // a missing file
    Config c;
    config_defaults(&c);
    Capture cap = capture_begin(2);
    EXPECT(config_load_json(&c, "/nonexistent/config.json") == -1, "missing file accepted");
    char *err = capture_end(&cap);
    check_one_line("missing file", err, "/nonexistent/config.json");
    free(err);

    // accepted variants
    expect_json_ok("{\"optimizer\": {\"type\": \"ADAMW\"}, \"scheduler\": {\"type\": \"warmupcosine\"}}");
    expect_json_ok("{}");
    expect_json_ok("  {\"_comment\": \"x\"}  \n");
}

// min_lr is a derived value (config_derive): lr/10 of the final lr unless given.
static void test_min_lr(void) {
    Config c;
    EXPECT(load_text(&c, "{\"optimizer\": {\"params\": {\"lr\": 0.002}}}", NULL) == 0, "lr only");
    config_derive(&c);
    EXPECT(feq(c.min_lr, 0.0002f) && !c.min_lr_set, "min_lr not lr/10 after JSON: %g", (double)c.min_lr);
    char *argv[] = {"ted", "train", "--lr", "0.005"};
    EXPECT(config_apply_flags(&c, 4, argv, 2) == 0, "--lr");
    config_derive(&c);
    EXPECT(feq(c.min_lr, 0.0005f), "min_lr does not follow --lr: %g", (double)c.min_lr);

    EXPECT(load_text(&c, "{\"scheduler\": {\"params\": {\"min_lr\": 0.00003}}}", NULL) == 0, "min_lr only");
    EXPECT(config_apply_flags(&c, 4, argv, 2) == 0, "--lr");
    config_derive(&c);
    EXPECT(feq(c.min_lr, 0.00003f) && feq(c.lr, 0.005f), "explicit JSON min_lr overridden");

    config_defaults(&c);
    char *argv2[] = {"--min-lr", "0", "--lr", "1"};
    EXPECT(config_apply_flags(&c, 4, argv2, 0) == 0 && c.min_lr == 0 && c.min_lr_set, "--min-lr 0");
}

// ---- flags --------------------------------------------------------------------------------
static int apply(Config *c, char **argv, int argc, char **err) {
    Capture cap = capture_begin(2);
    int rc = config_apply_flags(c, argc, argv, 0);
    char *e = capture_end(&cap);
    if (err) *err = e; else free(e);
    return rc;
}

static void test_flags_override(void) {
    Config c;
    EXPECT(load_text(&c, full_json, NULL) == 0, "full JSON");
    char *argv[] = {
        "--config", "ignored.json", "--data", "corpus.txt", "--steps", "5", "--micro-batch=6", "--grad-accum", "2",
        "--lr", "0.01", "--min-lr=1e-5", "--warmup", "3", "--weight-decay", "0.2", "--clip", "2.5",
        "--seed", "18446744073709551615", "--data-order", "shuffled", "--log", "log.jsonl", "--save", "ckpt",
        "--save-every", "9", "--resume", "old", "--eval-every", "11", "--eval-windows", "12", "--tp", "3",
        "--ep=2", "--seq-len", "32", "--log-every", "4", "--sample-every", "13", "--threads", "5",
        "--tile-size", "999", "--vocab-size", "1000", "--n-positions", "64", "--n-embd", "48",
        "--n-layer", "2", "--n-head", "3", "--n-inner", "96", "--num-experts", "4", "--top-k", "2",
        "--moe-every", "2", "--capacity-factor", "-1", "--min-capacity", "0", "--group-size", "3",
        "--aux-coef", "0.5", "--z-coef", "0.25", "--bf16", "--activation-checkpointing", "--dtd", "--cac",
    };
    int argc = (int)(sizeof argv / sizeof argv[0]);
    c.fp16 = 0;
    char *err;
    EXPECT(apply(&c, argv, argc, &err) == 0, "flags rejected: %s", err);
    free(err);
    const ModelConfig *m = &c.model;
    EXPECT(!strcmp(c.data, "corpus.txt") && !strcmp(c.log, "log.jsonl") && !strcmp(c.save, "ckpt") &&
           !strcmp(c.resume, "old"), "string flags");
    EXPECT(c.steps == 5 && c.micro_batch == 6 && c.grad_accum == 2 && feq(c.lr, 0.01f) && feq(c.min_lr, 1e-5f) &&
           c.warmup == 3 && feq(c.weight_decay, 0.2f) && feq(c.clip, 2.5f), "training flags");
    EXPECT(c.seed == 18446744073709551615ull && c.data_sequential == 0, "seed/data-order flags");
    EXPECT(c.save_every == 9 && c.eval_every == 11 && c.eval_windows == 12 && c.tp == 3 && c.ep == 2 &&
           c.seq_len == 32 && c.log_every == 4 && c.sample_every == 13 && c.threads == 5 && c.tile_size == 999,
           "io/layout flags");
    EXPECT(m->vocab_size == 1000 && m->n_positions == 64 && m->n_embd == 48 && m->n_layer == 2 && m->n_head == 3 &&
           m->n_inner == 96, "model flags");
    EXPECT(m->num_experts == 4 && m->top_k == 2 && m->moe_every == 2 && feq(m->capacity_factor, -1) &&
           m->min_capacity == 0 && m->group_size == 3 && feq(m->aux_coef, 0.5f) && feq(m->z_coef, 0.25f),
           "moe flags");
    EXPECT(c.bf16 && c.activation_checkpointing && c.dtd && c.cac, "switches");
    // untouched by flags: JSON values stay
    EXPECT(feq(c.beta1, 0.8f) && feq(c.eps, 1e-6f) && c.zero_stage == 0, "JSON-only values lost");

    // seq_len 0 resolves to n_positions once the values are derived (after the flags)
    config_defaults(&c);
    char *argv2[] = {"--n-positions", "100"};
    EXPECT(apply(&c, argv2, 2, NULL) == 0, "--n-positions");
    config_derive(&c);
    EXPECT(c.seq_len == 100, "seq_len not resolved: %d", c.seq_len);
}

static void expect_flag_error(char **argv, int argc, const char *want) {
    Config c;
    config_defaults(&c);
    char *err;
    int rc = apply(&c, argv, argc, &err);
    EXPECT(rc == -1, "flags accepted (%s ...)", argv[0]);
    if (rc == -1) check_one_line(argv[0], err, want);
    free(err);
}

static void test_flag_errors(void) {
    char *a1[] = {"--stepz", "3"};            expect_flag_error(a1, 2, "--stepz (did you mean --steps?");
    // other trainers' names, mapped in the message; nanoGPT's "_" read as "-"
    char *m1[] = {"--num-layers", "3"};       expect_flag_error(m1, 2, "--num-layers: Megatron's name; ted's is --n-layer");
    char *m2[] = {"--hidden-size", "64"};     expect_flag_error(m2, 2, "Megatron's name; ted's is --n-embd");
    char *m3[] = {"--tensor-model-parallel-size", "2"}; expect_flag_error(m3, 2, "Megatron's name; ted's is --tp");
    char *m4[] = {"--n_layer=4"};             expect_flag_error(m4, 1, "--n_layer (did you mean --n-layer?");
    char *m5[] = {"--learning_rate", "1"};    expect_flag_error(m5, 2, "nanoGPT's name; ted's is --lr");
    char *m6[] = {"--frobnicate", "1"};       expect_flag_error(m6, 2, "unknown flag --frobnicate (see ted train --help)");
    char *a2[] = {"--steps"};                 expect_flag_error(a2, 1, "--steps: missing value");
    char *a3[] = {"--data", "--steps", "3"};  expect_flag_error(a3, 3, "--data: missing value");
    char *a4[] = {"--steps", "abc"};          expect_flag_error(a4, 2, "--steps");
    char *a5[] = {"--steps", "12x"};          expect_flag_error(a5, 2, "--steps");
    char *a6[] = {"--steps", " 12"};          expect_flag_error(a6, 2, "--steps");
    char *a7[] = {"--steps="};                expect_flag_error(a7, 1, "--steps");
    char *a8[] = {"--steps", "99999999999"};  expect_flag_error(a8, 2, "--steps");
    char *a9[] = {"--steps", "1.5"};          expect_flag_error(a9, 2, "--steps");
    char *b1[] = {"--lr", "nan"};             expect_flag_error(b1, 2, "--lr");
    char *b2[] = {"--lr", "inf"};             expect_flag_error(b2, 2, "--lr");
    char *b3[] = {"--lr", "1e40"};            expect_flag_error(b3, 2, "--lr");
    char *b4[] = {"--lr", "0.1.2"};           expect_flag_error(b4, 2, "--lr");
    char *b5[] = {"--data-order", "random"};  expect_flag_error(b5, 2, "--data-order");
    char *b6[] = {"--bf16=1"};                expect_flag_error(b6, 1, "--bf16");
    char *b7[] = {"corpus.txt"};              expect_flag_error(b7, 1, "corpus.txt");
    char *b8[] = {"--seed", "-1"};            expect_flag_error(b8, 2, "--seed");
    char *b9[] = {"--seed", "99999999999999999999999"}; expect_flag_error(b9, 2, "--seed");
    char *c1[] = {"--tile-size", "-3"};       expect_flag_error(c1, 2, "--tile-size");
    char *c2[] = {"--top-k", ""};             expect_flag_error(c2, 2, "--top-k");
    char *c3[] = {"-steps", "3"};             expect_flag_error(c3, 2, "-steps");
    char *c4[] = {"--config"};                expect_flag_error(c4, 1, "--config");
    char *c5[] = {"--data="};                 expect_flag_error(c5, 1, "--data");
    static char longpath[2000];
    memset(longpath, 'a', sizeof longpath - 1);
    char *c6[] = {"--save", longpath};        expect_flag_error(c6, 2, "--save");
    char *c7[] = {"--"};                      expect_flag_error(c7, 1, "--");
}

// ---- validation ---------------------------------------------------------------------------
typedef void (*Mutate)(Config *);
#define CASE(name, body) static void name(Config *c) { body; }
CASE(v_head, c->model.n_head = 3)
CASE(v_topk_big, { c->model.num_experts = 2; c->model.top_k = 3; })
CASE(v_topk_zero, { c->model.num_experts = 4; c->model.top_k = 0; })
CASE(v_moe_every, c->model.moe_every = 0)
CASE(v_seq_long, c->seq_len = 257)
CASE(v_seq_neg, c->seq_len = -1)
CASE(v_group, { c->model.group_size = 3; })
CASE(v_vocab_small, c->model.vocab_size = 1)
CASE(v_vocab_big, c->model.vocab_size = 65537)
CASE(v_npos, c->model.n_positions = 0)
CASE(v_embd, c->model.n_embd = 0)
CASE(v_layer, c->model.n_layer = 0)
CASE(v_nhead0, c->model.n_head = 0)
CASE(v_inner, c->model.n_inner = -1)
CASE(v_experts, c->model.num_experts = 0)
CASE(v_micro, c->micro_batch = 0)
CASE(v_accum, c->grad_accum = 0)
CASE(v_accum_big, c->grad_accum = 1000000000)
CASE(v_clip, c->clip = -1)
CASE(v_freeze, c->freeze_step = 0)
CASE(v_topk_dense, c->model.top_k = 0)
CASE(v_lr, c->lr = -1e-3f)
CASE(v_minlr, c->min_lr = -1)
CASE(v_warmup, c->warmup = -1)
CASE(v_steps, c->steps = -1)
CASE(v_beta1, c->beta1 = 1.0f)
CASE(v_beta2, c->beta2 = -0.1f)
CASE(v_eps, c->eps = 0)
CASE(v_wd, c->weight_decay = -0.1f)
CASE(v_tp, c->tp = 0)
CASE(v_ep, c->ep = 0)
CASE(v_ep_div, { c->model.num_experts = 6; c->ep = 4; })
CASE(v_dense_ep, c->ep = 2)
CASE(v_tp_head, c->tp = 3)
CASE(v_tp_ffn, { c->model.n_inner = 1022; c->tp = 4; })
CASE(v_both16, { c->bf16 = 1; c->fp16 = 1; })
CASE(v_mincap, c->model.min_capacity = -1)
CASE(v_group0, c->model.group_size = 0)
CASE(v_zero, c->zero_stage = 3)
CASE(v_tile, c->tile_size = -1)
CASE(v_aux, c->model.aux_coef = -1)
CASE(v_threads, c->threads = -2)
CASE(v_save_every, c->save_every = -1)

static void v_llama(Config *c) { c->model.arch = ARCH_LLAMA; }
static void v_kv_div(Config *c) { v_llama(c); c->model.n_kv_head = 3; }
static void v_kv_tp(Config *c) { v_llama(c); c->model.n_kv_head = 2; c->tp = 4; }
static void v_kv_gpt2(Config *c) { c->model.n_kv_head = 2; }
static void v_untied_gpt2(Config *c) { c->model.tie_word_embeddings = 0; }
static void v_llama_gelu(Config *c) { v_llama(c); c->model.num_experts = 4; }
static void v_llama_cuda(Config *c) { v_llama(c); c->device = 1; }
static void v_llama_odd(Config *c) { v_llama(c); c->model.n_embd = 12; c->model.n_head = 4; c->model.n_inner = 48; }
static void v_llama_eps(Config *c) { v_llama(c); c->model.rms_norm_eps = 0; }

static void test_validate(void) {
    static const struct { Mutate f; const char *want; } cases[] = {
        {v_head, "n_embd (256) is not a multiple of n_head (3)"},
        {v_topk_big, "top_k (3) > num_experts (2)"},
        {v_topk_zero, "top_k (0)"},
        {v_moe_every, "moe_every (0)"},
        {v_seq_long, "seq_len (257) > n_positions (256)"},
        {v_seq_neg, "seq_len (-1)"},
        {v_group, "micro_batch (8) is not a multiple of group_size (3)"},
        {v_vocab_small, "vocab_size (1)"},
        {v_vocab_big, "vocab_size (65537)"},
        {v_npos, "n_positions (0)"},
        {v_embd, "n_embd (0)"},
        {v_layer, "n_layer (0)"},
        {v_nhead0, "n_head (0)"},
        {v_inner, "n_inner (-1)"},
        {v_experts, "num_experts (0)"},
        {v_micro, "micro_batch (0)"},
        {v_accum, "gradient_accumulation_steps (0) must be in [1, 65536]"},
        {v_accum_big, "gradient_accumulation_steps (1000000000) must be in [1, 65536]"},
        {v_lr, "lr (-0.001)"},
        {v_minlr, "min_lr (-1)"},
        {v_warmup, "scheduler.params.warmup_num_steps (-1) must be >= 0"},
        {v_clip, "gradient_clipping (-1) must be >= 0 (0: no clipping)"},
        {v_freeze, "optimizer.params.freeze_step (0) must be >= 1"},
        {v_topk_dense, "top_k (0) must be >= 1"},
        {v_steps, "steps (-1)"},
        {v_beta1, "beta1 (1)"},
        {v_beta2, "beta2 (-0.1)"},
        {v_eps, "eps (0)"},
        {v_wd, "weight_decay (-0.1)"},
        {v_tp, "tp (0)"},
        {v_ep, "ep (0)"},
        {v_ep_div, "num_experts (6) is not a multiple of ep (4)"},
        {v_dense_ep, "num_experts (1) is not a multiple of ep (2)"},
        {v_tp_head, "n_head (4) is not a multiple of tp (3)"},
        {v_tp_ffn, "FFN size (1022) is not a multiple of tp (4)"},
        {v_both16, "bf16 and fp16"},
        {v_mincap, "min_capacity (-1)"},
        {v_group0, "group_size (0)"},
        {v_zero, "zero_optimization.stage (3)"},
        {v_tile, "tile_size (-1)"},
        {v_aux, "aux_coef (-1)"},
        {v_threads, "threads (-2)"},
        {v_save_every, "save_every (-1)"},
        {v_kv_div, "n_kv_head (3) must divide n_head (4)"},
        {v_kv_tp, "n_kv_head (2) is not a multiple of tp (4)"},
        {v_kv_gpt2, "n_kv_head (2) needs model.arch llama"},
        {v_untied_gpt2, "tie_word_embeddings false needs model.arch llama"},
        {v_llama_gelu, "moe.expert_type must be swiglu"},
        {v_llama_cuda, "model.arch llama runs on the CPU only"},
        {v_llama_odd, "head size n_embd/n_head (3) must be even"},
        {v_llama_eps, "rms_norm_eps (0) must be > 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        config_defaults(&c);
        cases[i].f(&c);
        Capture cap = capture_begin(2);
        int rc = config_validate(&c);
        char *err = capture_end(&cap);
        EXPECT(rc == -1, "rule not enforced: %s", cases[i].want);
        if (rc == -1) {
            check_one_line(cases[i].want, err, cases[i].want);
            EXPECT(strstr(err, "invalid config: ") != NULL, "message style: %s", err);
        }
        free(err);
    }
    // things that are valid
    Config c;
    config_defaults(&c);
    c.model.top_k = 5;            // ignored for a dense model
    c.model.capacity_factor = 0;  // dropless
    c.clip = 0;
    c.seq_len = 256;
    EXPECT(config_validate(&c) == 0, "valid config rejected");
    c.model.num_experts = 8; c.model.top_k = 8; c.ep = 8; c.tp = 4; c.micro_batch = 4; c.model.group_size = 4;
    EXPECT(config_validate(&c) == 0, "valid MoE config rejected");
}

// ---- checkpoint config.json -------------------------------------------------------------
static void test_model_json(void) {
    Config a, b;
    config_defaults(&a);
    ModelConfig *m = &a.model;
    m->vocab_size = 50257; m->n_positions = 1024; m->n_embd = 768; m->n_layer = 12; m->n_head = 12;
    m->n_inner = 0; m->num_experts = 16; m->top_k = 2; m->moe_every = 2; m->capacity_factor = 1.1f;
    m->min_capacity = 3; m->group_size = 2; m->aux_coef = 0.013f; m->z_coef = 1e-3f;
    a.seq_len = 0;
    char *text = config_model_json(&a);
    EXPECT(text && strstr(text, "\"n_inner\": 3072") && strstr(text, "\"seq_len\": 1024"), "unresolved: %s", text);
    write_text(json_path, text);
    ted_free(text);
    config_defaults(&b);
    EXPECT(config_load_model_json(&b, json_path) == 0, "model json not read back");
    const ModelConfig *n = &b.model;
    EXPECT(n->vocab_size == 50257 && n->n_positions == 1024 && n->n_embd == 768 && n->n_layer == 12 &&
           n->n_head == 12 && n->n_inner == 3072 && n->num_experts == 16 && n->top_k == 2 && n->moe_every == 2 &&
           n->capacity_factor == 1.1f && n->min_capacity == 3 && n->group_size == 2 && n->aux_coef == 0.013f &&
           n->z_coef == 1e-3f && b.seq_len == 1024, "model json round trip differs");

    a.seq_len = 100;
    text = config_model_json(&a);
    write_text(json_path, text);
    ted_free(text);
    EXPECT(config_load_model_json(&b, json_path) == 0 && b.seq_len == 100, "seq_len round trip");

    // errors: unknown key, wrong type, missing key, malformed; c untouched on failure
    const struct { const char *text, *want; } bad[] = {
        {"{\"vocab_size\": 256, \"frobnicate\": \"gpt2\"}", "unknown key \"frobnicate\""},
        {"{\"model\": {\"vocab_size\": 256}}", "unknown key \"model\""},
        {"{\"vocab_size\": \"256\"}", "\"vocab_size\" must be an integer"},
        {"{\"vocab_size\": 256}", "missing key"},
        {"{\"vocab_size\": ", "malformed JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(json_path, bad[i].text);
        Config c;
        config_defaults(&c);
        Capture cap = capture_begin(2);
        int rc = config_load_model_json(&c, json_path);
        char *err = capture_end(&cap);
        EXPECT(rc == -1, "bad model json accepted: %s", bad[i].text);
        if (rc == -1) check_one_line(bad[i].text, err, bad[i].want);
        EXPECT(c.model.vocab_size == 256 && c.seq_len == 0, "config changed by a failed read");
        free(err);
    }
}

static void test_help(void) {
    Capture cap = capture_begin(1);
    config_print_train_help();
    char *out = capture_end(&cap);
    static const char *names[] = {
        "--config", "--data", "--steps", "--micro-batch", "--grad-accum", "--lr", "--min-lr", "--warmup",
        "--weight-decay", "--clip", "--seed", "--data-order", "--log", "--save", "--save-every", "--resume",
        "--eval-every", "--eval-windows", "--tp", "--ep", "--seq-len", "--log-every", "--sample-every",
        "--threads", "--tile-size", "--vocab-size", "--n-positions", "--n-embd", "--n-layer", "--n-head",
        "--n-inner", "--num-experts", "--top-k", "--moe-every", "--capacity-factor", "--min-capacity",
        "--group-size", "--aux-coef", "--z-coef", "--bf16", "--fp16", "--activation-checkpointing", "--dtd", "--cac", "--overlap-degree",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "  %s ", names[i]);
        EXPECT(strstr(out, want) != NULL, "help lacks %s", names[i]);
    }
    EXPECT(strstr(out, "train_micro_batch_size_per_gpu") && strstr(out, "moe.top_k"), "help lacks JSON keys");
    free(out);
}

// ---- the routing family (design) -------------------------------------------------------
static void route_validate(const char *want, void (*set)(Config *)) {
    Config c;
    config_defaults(&c);
    c.model.num_experts = 8;
    set(&c);
    Capture cap = capture_begin(2);
    int rc = config_validate(&c);
    char *err = capture_end(&cap);
    EXPECT(rc == -1, "routing rule not enforced: %s", want);
    if (rc == -1) check_one_line(want, err, want);
    free(err);
}
static void r_switch(Config *c) { c->model.router = ROUTER_SWITCH; }   // top_k 2 by default
static void r_gshard(Config *c) { c->model.router = ROUTER_GSHARD; c->model.top_k = 1; }
static void r_noisy(Config *c) { c->model.router = ROUTER_NOISY_TOPK; c->model.top_k = 8; }
static void r_groups(Config *c) { c->model.num_groups = 3; c->model.topk_groups = 1; }
static void r_topk_groups(Config *c) { c->model.num_groups = 4; c->model.topk_groups = 5; }
static void r_groups_k(Config *c) { c->model.num_groups = 8; c->model.topk_groups = 1; }
static void r_rts(Config *c) { c->model.use_rts = 1; c->model.capacity_factor = 0; }
static void r_ec_rts(Config *c) { c->model.router = ROUTER_EXPERT_CHOICE; c->model.use_rts = 1; }
static void r_ec_dropless(Config *c) { c->model.router = ROUTER_EXPERT_CHOICE; c->model.capacity_factor = 0; }
static void r_ec_groups(Config *c) { c->model.router = ROUTER_EXPERT_CHOICE; c->model.num_groups = 2; }
static void r_ec_bias(Config *c) { c->model.router = ROUTER_EXPERT_CHOICE; c->model.bias_update_rate = 0.01f; }
static void r_jitter(Config *c) { c->model.jitter_eps = 1; }
static void r_inner_tp(Config *c) { c->model.expert_inner = 30; c->tp = 4; }
static void r_cuda(Config *c) { c->model.router = ROUTER_GSHARD; c->device = 1; }
static void r_cuda_swiglu(Config *c) { c->model.expert_type = EXPERT_SWIGLU; c->device = 1; }

static void test_routing(void) {
    Config c;
    char *err;
    EXPECT(load_text(&c, "{\"moe\": {\"router\": \"noisy_topk\", \"use_rts\": true, \"jitter_eps\": 0.2, "
                         "\"importance_coef\": 0.3, \"load_coef\": 0.4, \"bias_update_rate\": 0.001, \"num_groups\": 2, "
                         "\"topk_groups\": 2, \"shared_experts\": 1, \"expert_inner\": 64, \"expert_type\": \"swiglu\"}}",
                   &err) == 0, "routing keys rejected: %s", err);
    free(err);
    ModelConfig *m = &c.model;
    EXPECT(m->router == ROUTER_NOISY_TOPK && m->use_rts && feq(m->jitter_eps, 0.2f) && feq(m->importance_coef, 0.3f) &&
           feq(m->load_coef, 0.4f) && feq(m->bias_update_rate, 0.001f) && m->num_groups == 2 && m->topk_groups == 2 &&
           m->shared_experts == 1 && m->expert_inner == 64 && m->expert_type == EXPERT_SWIGLU, "routing keys not stored");
    // the checkpoint's config.json carries them
    char *js = config_model_json(&c);
    write_text(json_path, js);
    ted_free(js);
    Config back;
    config_defaults(&back);
    EXPECT(config_load_model_json(&back, json_path) == 0, "routing config.json does not read back");
    const ModelConfig *r = &back.model;
    EXPECT(r->router == m->router && r->use_rts == m->use_rts && r->jitter_eps == m->jitter_eps &&
           r->importance_coef == m->importance_coef && r->load_coef == m->load_coef &&
           r->bias_update_rate == m->bias_update_rate && r->num_groups == m->num_groups &&
           r->topk_groups == m->topk_groups && r->shared_experts == m->shared_experts &&
           r->expert_inner == m->expert_inner && r->expert_type == m->expert_type, "routing config.json round trip differs");
    expect_json_error("{\"moe\": {\"router\": \"hash\"}}", "moe.router");
    // the llama family's keys: read, validated, carried by config.json; a gpt2 config.json has none of them
    EXPECT(load_text(&c, "{\"model\": {\"arch\": \"llama\", \"n_kv_head\": 2, \"rope_theta\": 500, "
                         "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false}, \"moe\": {\"router\": \"mixtral\"}}",
                   &err) == 0, "llama keys rejected: %s", err);
    free(err);
    EXPECT(m->arch == ARCH_LLAMA && m->n_kv_head == 2 && m->rope_theta == 500 && m->rms_norm_eps == 1e-6f &&
           !m->tie_word_embeddings && m->router == ROUTER_MIXTRAL, "llama keys not stored");
    js = config_model_json(&c);
    write_text(json_path, js);
    ted_free(js);
    config_defaults(&back);
    EXPECT(config_load_model_json(&back, json_path) == 0 && back.model.arch == ARCH_LLAMA && back.model.n_kv_head == 2 &&
           back.model.rope_theta == 500 && back.model.rms_norm_eps == 1e-6f && !back.model.tie_word_embeddings &&
           back.model.router == ROUTER_MIXTRAL, "llama config.json round trip differs");
    config_defaults(&c);
    js = config_model_json(&c);
    EXPECT(!strstr(js, "arch") && !strstr(js, "rope_theta"), "a gpt2 config.json names llama keys: %s", js);
    ted_free(js);
    expect_json_error("{\"model\": {\"arch\": \"mistral\"}}", "model.arch");
    expect_json_error("{\"moe\": {\"expert_type\": 3}}", "moe.expert_type");
    char *bad[] = {"--router", "hash"};
    expect_flag_error(bad, 2, "--router");
    char *bad2[] = {"--expert-type=relu"};
    expect_flag_error(bad2, 1, "--expert-type");
    route_validate("router switch routes top-1", r_switch);
    route_validate("router gshard routes top-2", r_gshard);
    route_validate("noisy_topk needs top_k (8) < num_experts (8)", r_noisy);
    route_validate("num_experts (8) is not a multiple of num_groups (3)", r_groups);
    route_validate("topk_groups (5) must be in [1, num_groups 4]", r_topk_groups);
    route_validate("top_k (2) > the experts of topk_groups (1) groups of 1", r_groups_k);
    route_validate("use_rts orders capacity slots", r_rts);
    route_validate("use_rts does not apply", r_ec_rts);
    route_validate("expert_choice needs capacity_factor > 0", r_ec_dropless);
    route_validate("group-limited routing does not apply", r_ec_groups);
    route_validate("a per-expert bias cannot change", r_ec_bias);
    route_validate("jitter_eps (1) must be in [0, 1)", r_jitter);
    route_validate("expert_inner (30) is not a multiple of tp (4)", r_inner_tp);
    route_validate("--device cuda: moe.router gshard", r_cuda);
    route_validate("--device cuda: expert_type swiglu", r_cuda_swiglu);
}

// Issue 25: duplicate keys anywhere; the wordings of array errors; keys of a switched-off feature
// warned (one rule for every section), and --num-experts 1 switching an MoE config to dense.
static void test_duplicates_and_switched_off(void) {
    expect_json_error("{\"model\": {\"n_layer\": 2}, \"model\": {\"n_embd\": 64}}", "key \"model\" appears twice");
    expect_json_error("{\"moe\": {\"top_k\": 1, \"router\": \"topk\", \"top_k\": 2}}", "key \"moe.top_k\" appears twice");
    expect_json_error("{\"sparse_attention\": {\"mode\": \"fixed\", \"block\": 16, \"mode\": \"fixed\"}}", "key \"sparse_attention.mode\" appears twice");
    expect_json_error("{\"pipeline\": {\"layers\": []}}", "pipeline.layers\" must be an array of 1 to 256 block counts, or \"auto\" (got an empty array)");
    expect_json_error("{\"pipeline\": {\"layers\": \"even\"}}", "pipeline.layers\" must be an array of 1 to 256 block counts, or \"auto\"");
    expect_json_error("{\"sparse_attention\": {\"local_window_blocks\": [-1]}}", "must be an array of integers >= 1 (entry 0 is -1)");
    char big[60000] = "{\"sparse_attention\": {\"local_window_blocks\": [1";
    for (int i = 1; i < 10000; i++) strcat(big, ",1");
    strcat(big, "]}}");
    expect_json_error(big, "must be an array of at most 64 entries (got 10000)");
    expect_json_error("{\"sparse_attention\": {\"local_window_blocks\": []}}", "must be a non-empty array (got [])");
    // an MoE config, then --num-experts 1: valid, and one warning names the MoE keys
    Config c;
    char *err;
    EXPECT(load_text(&c, "{\"moe\": {\"num_experts\": 4, \"capacity_factor\": 1.25, \"shared_experts\": 2, "
                         "\"num_groups\": 2}, \"optimizer\": {\"params\": {\"freeze_step\": 7}}, "
                         "\"fp16\": {\"enabled\": false, \"hysteresis\": 4}}", &err) == 0, "moe config: %s", err);
    free(err);
    char *argv[] = {"--num-experts", "1"};
    EXPECT(config_apply_flags(&c, 2, argv, 0) == 0 && config_validate(&c) == 0, "--num-experts 1 on an MoE config refused");
    FILE *f = tmpfile();
    config_warn(&c, f);
    char text[2048] = "";
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    EXPECT(strstr(text, "warning: moe.capacity_factor, moe.shared_experts, moe.num_groups have no effect: num_experts is 1"),
           "no MoE warning: %s", text);
    EXPECT(strstr(text, "warning: optimizer.params.freeze_step has no effect: optimizer.type is AdamW"), "freeze_step: %s", text);
    EXPECT(strstr(text, "warning: fp16.hysteresis has no effect: fp16 is not enabled"), "fp16: %s", text);
    EXPECT(count_lines(text) == 3, "%d warning lines: %s", count_lines(text), text);
}


// ---- issues 41 and 42: every key's type and range, one report per file, no 0 for a default,
// bounded sizes, DeepSpeed's keys as DeepSpeed means them, config_check without a word ---------

// ted train's resolution (config_resolve) of a JSON text and space-separated flags: rc, stderr.
static int resolve(Config *c, const char *json, const char *flags, char **err) {
    write_text(json_path, json);
    char buf[512], *argv[40] = {"train", "--config", json_path};
    int argc = 3;
    snprintf(buf, sizeof buf, "%s", flags);
    for (char *t = strtok(buf, " "); t && argc < 40; t = strtok(NULL, " ")) argv[argc++] = t;
    Capture cap = capture_begin(2);
    int rc = config_resolve(c, argc, argv, config_defaults, NULL);
    char *e = capture_end(&cap);
    if (err) *err = e;
    else free(e);
    return rc;
}

static void expect_refused(const char *json, const char *flags, const char *want) {
    Config c;
    char *err;
    int rc = resolve(&c, json, flags, &err);
    EXPECT(rc == -1, "accepted: %s %s", json, flags);
    if (rc == -1) check_one_line(want, err, want);
    char file[600];   // a rule broken by a key of the file names the file; one broken by a flag, none
    snprintf(file, sizeof file, "%s: invalid config: ", json_path);
    EXPECT(rc == -1 && !strstr(err, file) == !!flags[0], "%s %s: the line %s the file: %s", json, flags,
           flags[0] ? "does not name" : "names", err);
    free(err);
}

static char *warnings_of(const Config *c) {
    Capture cap = capture_begin(1);
    config_warn(c, stdout);
    return capture_end(&cap);
}

// A type error, a key twice in a nested object, unknown keys, a nested DeepSpeed section's wrong
// type and two names of one setting at odds: every problem of the file in one line.
static void test_one_report(void) {
    Config c;
    char *err;
    int rc = load_text(&c, "{\"train_micro_batch_size_per_gpu\": \"2\", \"steps_per_print\": 10, \"log_every\": 5, "
                           "\"zero_optimization\": {\"stage\": 1, \"contiguous_gradients\": 1, \"stage\": 2, "
                           "\"allgather_bucket_size\": -5, \"offload_optimizer\": {\"pin_memory\": \"yes\"}}, "
                           "\"optimizr\": {}, \"sparse_attention\": {\"mode\": \"fixed\", \"block\": 0}}", &err);
    static const char *want[] = {
        "8 problems: ",
        "key \"train_micro_batch_size_per_gpu\" must be an integer (got the string \"2\")",
        "key \"zero_optimization.stage\" appears twice in one object",
        "key \"zero_optimization.contiguous_gradients\" must be true or false (got 1)",
        "key \"zero_optimization.allgather_bucket_size\" must be an integer in [1, 2^53] (got -5)",
        "key \"zero_optimization.offload_optimizer.pin_memory\" must be true or false (got the string \"yes\")",
        "unknown key \"optimizr\" (did you mean \"optimizer\"?)",
        "key \"sparse_attention.block\" must be an integer >= 1",
        "\"steps_per_print\" 10 and \"log_every\" 5 name one setting with two values (give one)",
    };
    EXPECT(rc == -1 && count_lines(err) == 1, "one report: rc %d, %s", rc, err);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) EXPECT(strstr(err, want[i]), "lacks %s: %s", want[i], err);
    free(err);
    expect_json_ok("{\"steps_per_print\": 5, \"log_every\": 5}");   // the same value twice is one setting
    expect_json_error("{\"scheduler\": {\"params\": {\"min_lr\": 1, \"min_lr\": 2}}}",
                      "key \"scheduler.params.min_lr\" appears twice in one object");
}

// Nonsense scheduler values, the warm-up, a step's micro-batches and the keys whose 0 would stand
// for a default: refused in one line naming the key as the user gave it (JSON key or flag).
static void test_ranges(void) {
    static const char *const cases[][3] = {
        {"{\"gradient_clipping\": -1}", "", "gradient_clipping (-1) must be >= 0 (0: no clipping)"},
        {"{}", "--clip -0.5", "--clip (-0.5) must be >= 0"},
        {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 100, \"cos_min_ratio\": 2}}}", "",
         "scheduler.params.cos_min_ratio (2) must be in [0, 1]"},
        {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 100, \"warmup_min_ratio\": 1.5}}}",
         "", "scheduler.params.warmup_min_ratio (1.5) must be in [0, 1]"},
        {"{\"optimizer\": {\"params\": {\"lr\": 0.001}}, \"scheduler\": {\"params\": {\"min_lr\": 0.01}}}", "",
         "scheduler.params.min_lr (0.01) is above the peak optimizer.params.lr (0.001)"},
        {"{}", "--lr 0.001 --min-lr 0.002", "--min-lr (0.002) is above the peak --lr (0.001)"},
        {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.01, \"warmup_max_lr\": 0.001}}}", "",
         "warmup_min_lr (0.01) is above the warm-up's peak warmup_max_lr (0.001)"},
        {"{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": 0.01, \"total_num_steps\": 9}}}", "",
         "warmup_min_lr (0.01) is above the warm-up's peak (0.001)"},
        {"{\"scheduler\": {\"params\": {\"warmup_num_steps\": -3}}}", "", "scheduler.params.warmup_num_steps (-3) must be >= 0"},
        {"{}", "--warmup -3", "--warmup (-3) must be >= 0"},
        {"{\"gradient_accumulation_steps\": 1000000000}", "", "gradient_accumulation_steps (1000000000) must be in [1, 65536]"},
        {"{}", "--grad-accum 65537", "--grad-accum (65537) must be in [1, 65536]"},
        {"{\"optimizer\": {\"params\": {\"freeze_step\": -7}}}", "", "optimizer.params.freeze_step (-7) must be >= 1"},
        {"{\"seq_len\": 0}", "", "seq_len 0 is not a length (leave it out for n_positions, 256)"},
        {"{}", "--seq-len 0", "--seq-len 0 is not a length"},
        {"{\"model\": {\"n_inner\": 0}}", "", "model.n_inner 0 is not a width (leave it out for 4 x n_embd, 1024)"},
        {"{\"moe\": {\"num_experts\": 4, \"expert_inner\": 0}}", "", "moe.expert_inner 0 is not a width"},
        {"{\"model\": {\"arch\": \"llama\", \"n_kv_head\": 0}}", "", "model.n_kv_head 0 is not a number of heads"},
        {"{\"threads\": 0}", "", "threads 0 is not a number of threads (leave it out for every core)"},
        {"{\"train_batch_size\": 0}", "", "train_batch_size 0 is not a batch"},
        {"{}", "--peak-tflops 0", "--peak-tflops 0 is not a peak"},
        {"{\"tensorboard\": {\"enabled\": true, \"output_path\": \"\", \"job_name\": \"j\"}}", "",
         "tensorboard.output_path is empty: give the folder to write under"},
        {"{\"csv_monitor\": {\"enabled\": true, \"output_path\": \"\"}}", "", "csv_monitor.output_path is empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_refused(cases[i][0], cases[i][1], cases[i][2]);
    Config c;
    char *err;
    EXPECT(resolve(&c, "{\"gradient_accumulation_steps\": 65536, \"gradient_clipping\": 0}", "--min-lr 0.0006", &err) == 0 &&
               c.seq_len == 256 && c.grad_accum == 65536,
           "the bounds themselves, clipping off, min_lr = lr and seq_len left out: %s", err);
    free(err);
}

// DeepSpeed's ZeRO keys that change nothing in ted run unedited, a warning only where the value
// asks for something ted does not do; optimizer.type "Adam" is AdamW unless adam_w_mode is false.
static void test_deepspeed(void) {
    Config c;
    char *err;
    const char *zero = "\"zero_optimization\": {\"stage\": 2, \"contiguous_gradients\": %s, \"overlap_comm\": false, "
                       "\"reduce_scatter\": %s, \"allgather_partitions\": %s, \"allgather_bucket_size\": 5e8, "
                       "\"round_robin_gradients\": %s, \"offload_optimizer\": {\"device\": \"none\", \"pin_memory\": %s}}";
    char json[1024], fmt[1024];
    snprintf(fmt, sizeof fmt, "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"weight_decay\": 0.1, "
                              "\"adam_w_mode\": true}}, %s}", zero);
    snprintf(json, sizeof json, fmt, "true", "true", "true", "false", "false");
    EXPECT(resolve(&c, json, "", &err) == 0 && !c.onebit && c.adam_named && c.zero_stage == 2, "DeepSpeed ZeRO-2: %s", err);
    free(err);
    ConfigSettings S;
    config_settings(&c, &S);
    int adam = 0;
    for (int i = 0; i < S.n; i++) adam |= !strcmp(S.s[i].name, "optimizer.type") && !strcmp(S.s[i].value, "Adam");
    EXPECT(adam, "the run record says optimizer.type Adam");
    char *w = warnings_of(&c);
    EXPECT(count_lines(w) == 1 && strstr(w, "warning: zero_optimization.allgather_bucket_size has no effect: ted gathers "
                                            "each parameter whole"), "ted's own values: one warning: %s", w);
    free(w);
    snprintf(json, sizeof json, fmt, "false", "false", "false", "true", "true");
    EXPECT(resolve(&c, json, "", &err) == 0, "the other values: %s", err);
    free(err);
    w = warnings_of(&c);
    EXPECT(count_lines(w) == 6 && strstr(w, "warning: zero_optimization.contiguous_gradients false has no effect: ted keeps") &&
               strstr(w, "warning: zero_optimization.round_robin_gradients true has no effect") &&
               strstr(w, "warning: zero_optimization.offload_optimizer.pin_memory true has no effect"),
           "a warning per key asking for something else: %s", w);
    free(w);
    expect_refused("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}}", "",
                   "optimizer.type Adam with optimizer.params.adam_w_mode false adds weight_decay (0.1) x w to the gradient");
    EXPECT(resolve(&c, "{\"optimizer\": {\"type\": \"adam\", \"params\": {\"adam_w_mode\": false, \"weight_decay\": 0}}}",
                   "", &err) == 0, "Adam with L2 of weight 0 is AdamW: %s", err);
    free(err);
    EXPECT(resolve(&c, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"adam_w_mode\": false}}}", "", &err) == 0,
           "AdamW ignores adam_w_mode, as in DeepSpeed: %s", err);
    free(err);
    w = warnings_of(&c);
    EXPECT(strstr(w, "warning: optimizer.params.adam_w_mode has no effect: optimizer.type AdamW decays"), "%s", w);
    free(w);
}

// config_check: the rules without a word, the reason handed over; config_validate prints that text.
static void test_check_quiet(void) {
    Config c;
    config_defaults(&c);
    c.tp = 3;
    char why[256] = "x";
    size_t temp = mem_stats()->current[MEM_TEMP];
    Capture e = capture_begin(2), o = capture_begin(1);
    int rc = config_check(&c, why, sizeof why);
    char *out = capture_end(&o), *err = capture_end(&e);
    EXPECT(rc == -1 && !strcmp(why, "n_head (4) is not a multiple of tp (3)"), "config_check: %d \"%s\"", rc, why);
    EXPECT(!out[0] && !err[0] && mem_stats()->current[MEM_TEMP] == temp, "config_check printed or kept memory: %s%s", out, err);
    free(out);
    free(err);
    e = capture_begin(2);
    EXPECT(config_validate(&c) == -1, "config_validate");
    err = capture_end(&e);
    EXPECT(count_lines(err) == 1 && strstr(err, "invalid config: n_head (4) is not a multiple of tp (3)"), "%s", err);
    free(err);
    c.tp = 1;
    c.sparse.mode = SPARSE_FIXED;
    c.sparse.block = 7;
    EXPECT(config_check(&c, why, sizeof why) == -1 && !strcmp(why, "sparse_attention: seq_len (256) is not a multiple of "
                                                                   "block (7)"), "a sparse rule: \"%s\"", why);
    c.sparse.block = 16;
    EXPECT(config_check(&c, why, sizeof why) == 0 && !why[0] && config_check(&c, NULL, 0) == 0, "valid: \"%s\"", why);
}

// A warm-up longer than the run, and a DeepSpeed decay that ends before its warm-up: one note each.
static void test_warmup_note(void) {
    Config c;
    char *err, *w;
    EXPECT(resolve(&c, "{}", "--steps 50 --warmup 100", &err) == 0, "%s", err);
    free(err);
    w = warnings_of(&c);
    EXPECT(count_lines(w) == 1 && strstr(w, "note: the warm-up (100 steps) is longer than the run (50 steps): the lr "
                                            "never reaches its peak"), "%s", w);
    free(w);
    EXPECT(resolve(&c, "{}", "--steps 100 --warmup 100", &err) == 0, "%s", err);
    free(err);
    w = warnings_of(&c);
    EXPECT(!w[0], "a warm-up as long as the run reaches its peak: %s", w);
    free(w);
    EXPECT(resolve(&c, "{\"scheduler\": {\"type\": \"WarmupLR\"}}", "--steps 24", &err) == 0, "%s", err);
    free(err);
    w = warnings_of(&c);
    EXPECT(strstr(w, "note: the warm-up (1000 steps) is longer than the run (24 steps)"), "DeepSpeed's default: %s", w);
    free(w);
    EXPECT(resolve(&c, "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 10, "
                       "\"total_num_steps\": 5}}}", "--steps 30", &err) == 0, "%s", err);
    free(err);
    w = warnings_of(&c);
    EXPECT(count_lines(w) == 1 && strstr(w, "note: scheduler.params.total_num_steps (5) ends before the warm-up (10 steps)"),
           "%s", w);
    free(w);
}

// A checkpoint's config.json: the model and moe keys flat at the top level (design §7), the widths
// whose 0 would mean another key written as they are; the nested "ted" object of an earlier version
// still read; every key's type and range checked, the file named.
static char *flat_variant(const char *flat, const char *from, const char *to, Config *c) {
    char text[8192];
    const char *at = strstr(flat, from);
    if (!at) return strdup("variant not found");
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - flat), flat, to, at + strlen(from));
    write_text(json_path, text);
    config_defaults(c);
    Capture cap = capture_begin(2);
    int rc = config_load_model_json(c, json_path);
    char *err = capture_end(&cap);
    if (!rc) err[0] = 0;
    return err;
}

static void test_checkpoint_keys(void) {
    Config a, b;
    config_defaults(&a);
    a.model.num_experts = 4;
    char *flat = config_model_json(&a);
    static const char *const spec[] = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
                                       "num_experts", "top_k", "moe_every", "capacity_factor", "min_capacity",
                                       "group_size", "aux_coef", "z_coef"};
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "\n  \"%s\": ", spec[i]);
        EXPECT(strstr(flat, key), "config.json lacks the top-level %s: %s", spec[i], flat);
    }
    EXPECT(!strstr(flat, "\"ted\"") && strstr(flat, "\"expert_inner\": 1024,"), "flat, widths resolved: %s", flat);
    // the form of an earlier version: everything but GPT-2's shape keys in "ted"
    char nested[8192], *err;
    const char *moe = strstr(flat, "\"num_experts\""), *end = strrchr(flat, '}');
    snprintf(nested, sizeof nested, "%.*s\"ted\": {%.*s}}", (int)(moe - flat), flat, (int)(end - moe), moe);
    write_text(json_path, nested);
    config_defaults(&b);
    EXPECT(config_load_model_json(&b, json_path) == 0 && b.model.num_experts == 4 && b.model.top_k == 2 &&
               b.model.expert_inner == 1024 && b.seq_len == 256,
           "the nested form of an earlier version reads back: %s", nested);
    static const char *const bad[][3] = {
        {"\"top_k\": 2", "\"top_k\": \"2\"", "key \"top_k\" must be an integer (got the string \"2\")"},
        {"\"top_k\": 2", "\"top_k\": 2, \"top_k\": 3", "key \"top_k\" appears twice in one object"},
        {"\"num_groups\": 1", "\"num_groups\": 0", "invalid config: num_groups (0) must be >= 1"},
        {"\"jitter_eps\": 0.01", "\"jitter_eps\": 3", "invalid config: jitter_eps (3) must be in [0, 1)"},
        {"\"top_k\": 2", "\"top_k\": 0", "invalid config: top_k (0) must be >= 1"},
        {"\"seq_len\": 256", "\"sparse_attention\": {\"mode\": \"fixed\", \"block\": 7}, \"seq_len\": 256",
         "invalid config: sparse_attention: seq_len (256) is not a multiple of block (7)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = flat_variant(flat, bad[i][0], bad[i][1], &b);
        check_one_line(bad[i][1], err, bad[i][2]);
        EXPECT(strstr(err, json_path), "the file is not named: %s", err);
        free(err);
    }
    ted_free(flat);
}

int main(void) {
    strcpy(json_path, "/tmp/test_config_XXXXXX");
    int fd = mkstemp(json_path);
    if (fd < 0) { perror("mkstemp"); return 1; }
    close(fd);
    test_defaults();
    test_full_json();
    test_json_errors();
    test_min_lr();
    test_flags_override();
    test_flag_errors();
    test_validate();
    test_model_json();
    test_help();
    test_routing();
    test_duplicates_and_switched_off();
    test_one_report();
    test_ranges();
    test_deepspeed();
    test_check_quiet();
    test_warmup_note();
    test_checkpoint_keys();
    unlink(json_path);
    EXPECT(mem_stats()->current[MEM_TEMP] == 0, "%zu temp bytes leaked", mem_stats()->current[MEM_TEMP]);
    return test_exit("test_config");
}
