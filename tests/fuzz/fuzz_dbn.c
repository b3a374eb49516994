/* fuzz_dbn.c — libFuzzer target: Databento DBN (src/data/dbn.c), plain or zstd-compressed, from
 * bytes in memory: the sniffing of the format, decompression (the rss and malloc limits of
 * scripts/fuzz catch an input that inflates without bound), the metadata and symbol mappings,
 * and the records. Each input is read three ways: a scan (no series), the bars of the only
 * instrument, and, when the metadata names one, the bars of that symbol. */
#include "vixen/data.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vx_format_sniff(data, size < VX_SNIFF_BYTES ? size : VX_SNIFF_BYTES);
    vx_dbn_info *info = malloc(sizeof *info);
    if (!info) return 0;
    vx_load_opts opts = {.instrument = NULL};
    vx_status scan = vx_dbn_parse("fuzz.dbn", data, size, &opts, NULL, info, NULL);
    vx_series s = {0};
    vx_dbn_parse("fuzz.dbn", data, size, &opts, &s, NULL, NULL);
    vx_series_free(&s);
    if (scan == VX_OK && info->n_mappings > 0) {
        opts.instrument = info->mappings[0].raw;
        vx_series t = {0};
        vx_dbn_parse("fuzz.dbn", data, size, &opts, &t, NULL, NULL);
        vx_series_free(&t);
    }
    free(info);
    return 0;
}
