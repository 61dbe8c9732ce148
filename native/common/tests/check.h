/* The checks of the native tests, in C99 and C++: CHECK(cond, format, ...)
 * counts a check and, where cond is false, a failure, printing
 * "FAIL file:line: cond: message" on stdout. The tests end with
 * check_summary() or a summary line of their own. */
#ifndef MLXN_TESTS_CHECK_H
#define MLXN_TESTS_CHECK_H

#include <stdio.h>

static int checks, failures;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    ++checks;                                             \
    if (!(cond)) {                                        \
      ++failures;                                         \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                \
      printf("\n");                                       \
    }                                                     \
  } while (0)

/* Prints "N checks, M failures"; the exit status: 0 when none failed. */
static inline int check_summary(void) {
  printf("%d checks, %d failures\n", checks, failures);
  return failures != 0;
}

#endif
