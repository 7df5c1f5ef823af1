#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "error.h"

void
idem_env_prefer_self(void)
{
	char self[PATH_MAX], *slash, *path;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return;
	self[n] = '\0';
	if ((slash = strrchr(self, '/')) == NULL)
		return;
	*slash = '\0';
	if (asprintf(&path, "%s:%s", self, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin") < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	setenv("PATH", path, 1);
	free(path);
}

void
idem_env_export_settings(const char *text)
{
	char *copy = idem_estrdup(text), *line, *save = NULL;

	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *end;

		if (eq == NULL || eq[1] != '\'' || (end = strstr(eq + 2, "';")) == NULL)
			continue;
		*eq = '\0';
		*end = '\0';
		setenv(line, eq + 2, 1);
	}
	free(copy);
}
