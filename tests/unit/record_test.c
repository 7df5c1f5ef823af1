#include <math.h>
#include <stdio.h>

#include "record.h"
#include "unit.h"

/* kill-at's attempt rows are joined by PostgreSQL: tests/tools/evidence-join,
 * run by tests/evidence.bats, holds their cases. */
int
main(void)
{
	{
		/* published values of the Wilson score interval at 95% */
		double low, high;

		CHECK(idem_record_wilson(0, 6, &low, &high) == 0 && low == 0.0 &&
		    fabs(high - 0.390334) < 1e-6, "wilson: 0 of 6 is [0, 0.390334]");
		CHECK(idem_record_wilson(0, 1000000, &low, &high) == 0 && low == 0.0 &&
		    fabs(high - 3.841444e-6) < 1e-12, "wilson: 0 of 1000000 is [0, 3.841444e-6]");
		CHECK(idem_record_wilson(5, 100, &low, &high) == 0 && fabs(low - 0.021544) < 1e-6 &&
		    fabs(high - 0.111750) < 1e-6, "wilson: 5 of 100 is [0.021544, 0.111750]");
		CHECK(idem_record_wilson(3, 3, &low, &high) == 0 && fabs(low - 0.438503) < 1e-6 &&
		    high == 1.0, "wilson: 3 of 3 is [0.438503, 1]");
		CHECK(idem_record_wilson(0, 0, &low, &high) == -1, "wilson: no trials, no interval");
		CHECK(idem_record_wilson(7, 6, &low, &high) == -1, "wilson: more events than trials");
	}
	return unit_done("record");
}
