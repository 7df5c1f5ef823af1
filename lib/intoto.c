#include <string.h>

#include "intoto.h"

const char *
idem_intoto_result(const char *verdict)
{
	if (verdict != NULL && strcmp(verdict, "pass") == 0)
		return "PASSED";
	if (verdict != NULL && strcmp(verdict, "best effort") == 0)
		return "WARNED";
	return "FAILED";
}
