/* env.h: the environment a program hands the programs it runs: its own
 * directory first on PATH, and a sandbox's settings as idem-sandbox(1)
 * prints them */
#ifndef IDEM_ENV_H
#define IDEM_ENV_H

/* PATH with the directory of this program's executable first, so that the
 * programs it runs are those it was built or installed with. */
void idem_env_prefer_self(void);

/* Sets each variable of text, idem-sandbox start's settings, a line
 * "NAME='value'; export NAME;" each; other lines are passed over. */
void idem_env_export_settings(const char *text);

#endif
