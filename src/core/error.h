// error.h — error handling used everywhere. User errors (bad input, bad options) print one
// line and exit 2; internal failures (out of memory, an I/O error mid-write) exit 1.
// Allocates nothing, so that the allocator itself can fail through it.
#pragma once
#include <stdio.h>
#include <stdlib.h>

#define TED_EXIT_USAGE 2

// Prints "ted: <message>" as one line on stderr and ends the process (all ranks, under MPI).
void ted_fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
// Prints "ted: <message>" as one line on stderr (rank 0 only under MPI, unless every rank calls it).
void ted_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Under MPI: hold error lines back until ted_agree. ted_agree is collective over the world:
// it returns nonzero on every rank when any rank failed, and the lowest failing rank prints
// its line. Without MPI it prints at once and returns `failed`.
void ted_defer_errors(int on);
// While buf is not NULL, error lines are kept, not printed: the first one goes into buf (n bytes),
// for a caller that tries something and reports why it failed in its own words (ted tune asks
// ted train's rules about each layout). ted_error_capture(NULL, 0) prints again.
void ted_error_capture(char *buf, size_t n);
int ted_agree(int failed);

#define CHECK(cond, ...) do { if (!(cond)) ted_fatal(1, __VA_ARGS__); } while (0)
