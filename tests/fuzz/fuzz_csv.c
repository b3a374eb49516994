/* fuzz_csv.c — libFuzzer target: CSV bars (src/data/csv.c) from bytes in memory, as `vixen data
 * inspect` and training read them: the header, separators, every timestamp format, numbers and
 * the per-bar rule. A parsed series is summarised too, so its arrays are read end to end. The
 * input is not NUL-terminated: the parser must keep to its length. */
#include "vixen/data.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vx_series s = {0};
    vx_load_opts opts = {.instrument = NULL};
    if (vx_csv_parse("fuzz.csv", (const char *)data, size, &opts, &s, NULL) == VX_OK) {
        vx_series_stats st;
        vx_series_stats_compute(&s, &st);
    }
    vx_series_free(&s);
    return 0;
}
