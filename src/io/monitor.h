// monitor.h — live metrics: TensorBoard event files (DeepSpeed's "tensorboard" section or
// Megatron's --tensorboard-dir) and DeepSpeed's "csv_monitor" (one step,value file per metric),
// written by rank 0 as the run goes.
//
// An event file is a sequence of records: the data's length (uint64, little-endian), the masked
// CRC-32C of those 8 bytes (uint32), the data, the masked CRC-32C of the data; masked(c) =
// ((c >> 15) | (c << 17)) + 0xa282ead8. Each record's data is a protobuf `Event` (wall_time = 1,
// double; step = 2, int64; file_version = 3, string; summary = 5, message), the first one
// carrying file_version "brain.Event:2", the others a `Summary` of `Value`s (tag = 1, string;
// simple_value = 2, float), encoded here directly.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "config/config.h"

typedef struct {
    FILE *tb;            // the event file (NULL: off)
    char csv_dir[1100];  // the csv_monitor folder ("": off)
    char tb_file[1400];
} Monitor;

// Opens what the config asks for (rank 0 only; others pass rank0 0): 0, or -1 after one line. A
// folder is the run's as --log is: locked, and another run's files there refused unless --resume
// (written beside) or --overwrite (removed); an empty output_path is refused on every rank.
int monitor_open(Monitor *mon, const Config *c, int rank0);
// One scalar of a step: tag ("Train/loss"), value. A csv file that cannot be written ends the run.
void monitor_scalar(Monitor *mon, const char *tag, double value, long step);
// Makes what was written visible to a reader (after each step); a failed write ends the run,
// naming the file (core/util.h's write_check).
void monitor_flush(Monitor *mon);
void monitor_close(Monitor *mon);
// The masked CRC-32C of a TensorBoard record (exposed for tests).
uint32_t monitor_masked_crc(const void *data, size_t n);
