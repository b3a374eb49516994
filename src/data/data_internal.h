/* data_internal.h — helpers shared by the data layer's files, not part of the public API. */
#ifndef VIXEN_DATA_INTERNAL_H
#define VIXEN_DATA_INTERNAL_H

#include <stdint.h>
#include "vixen/data.h"

int64_t vx_days_from_civil(int y, unsigned m, unsigned d);
void vx_civil_from_days(int64_t z, int *y, unsigned *m, unsigned *d);
int64_t vx_eastern_offset_s(int64_t utc_s); /* seconds to add to UTC to get New York time */
void vx_series_set_interval(vx_series *s);

/* Regular trading hours in New York time, minutes after midnight. */
#define VX_RTH_OPEN_MIN (9 * 60 + 30)
#define VX_RTH_CLOSE_MIN (16 * 60)

#endif
