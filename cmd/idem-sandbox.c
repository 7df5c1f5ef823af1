/* idem-sandbox: start and stop a throwaway PostgreSQL for rehearsals, with
 * the idem queue schema, roles and sandbox marker, and print the PG*
 * settings that reach it. */
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <glob.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "pg.h"
#include "template.h"
#include "error.h"
#include "embed.h"

EMBED(idem_sql_queue, "lib/queue.sql");
extern const char idem_sql_queue[];

#define SOCKET_PORT "5432"
#define SUPERUSER "idem"
#define DATABASE "idem"

static const char synopsis[] =
	"usage: idem-sandbox [-D dir] [-u user] start\n"
	"       idem-sandbox [-D dir] env\n"
	"       idem-sandbox [-D dir] status\n"
	"       idem-sandbox [-D dir] [-u user] [--purge] stop\n";

static char dir[PATH_MAX], data_dir[PATH_MAX], run_dir[PATH_MAX], log_path[PATH_MAX];
static char marker_path[PATH_MAX], bindir[PATH_MAX];
static const char *server_user;
static struct passwd server_pw;

static void
path_join(char *out, const char *a, const char *b)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", a, b);

	if (n < 0 || n >= PATH_MAX)
		idem_die(IDEM_EXIT_USAGE, "%s/%s: path too long", a, b);
}

static void
set_paths(const char *d)
{
	if (strlen(d) >= sizeof(dir))
		idem_die(IDEM_EXIT_USAGE, "%s: path too long", d);
	if (d[0] != '/')
		idem_die(IDEM_EXIT_USAGE, "-D %s: the sandbox directory must be an absolute path", d);
	if (strpbrk(d, "'\"\\$`\n\t ") != NULL)
		idem_die(IDEM_EXIT_USAGE, "-D %s: quotes, backslashes, $, ` and white space are "
		    "not allowed in the sandbox path", d);
	strcpy(dir, d);
	path_join(data_dir, dir, "data");
	path_join(run_dir, dir, "run");
	path_join(log_path, dir, "server.log");
	path_join(marker_path, dir, ".idem-sandbox");
}

/* Debian's server package first (/usr/lib/postgresql/N/bin, newest N), then PATH. */
static void
find_bindir(void)
{
	const char *env = getenv("IDEM_PG_BINDIR");
	glob_t g;
	char *path, *p, *save = NULL, candidate[PATH_MAX];

	if (env && *env) {
		snprintf(bindir, sizeof(bindir), "%s", env);
		return;
	}
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) == 0) {
		size_t i, best = 0;
		long best_version = -1;

		for (i = 0; i < g.gl_pathc; i++) {
			long v = strtol(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"), NULL, 10);

			if (v > best_version) {
				best_version = v;
				best = i;
			}
		}
		snprintf(bindir, sizeof(bindir), "%.*s", (int)(strlen(g.gl_pathv[best]) - 7),
		    g.gl_pathv[best]);
		globfree(&g);
		return;
	}
	path = idem_estrdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	for (p = strtok_r(path, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		path_join(candidate, p, "initdb");
		if (access(candidate, X_OK) == 0) {
			snprintf(bindir, sizeof(bindir), "%s", p);
			free(path);
			return;
		}
	}
	free(path);
	idem_die(IDEM_EXIT_ENV, "no PostgreSQL server found (initdb): install it with "
	    "apt-get install postgresql, or set IDEM_PG_BINDIR");
}

static void
set_server_user(const char *user)
{
	struct passwd *pw;

	if (geteuid() != 0) {
		if (user != NULL)
			idem_die(IDEM_EXIT_USAGE, "-u needs root: the server runs as you");
		pw = getpwuid(geteuid());
	} else {
		server_user = user ? user : "postgres";
		pw = getpwnam(server_user);
		if (pw == NULL)
			idem_die(IDEM_EXIT_ENV, "user %s does not exist: PostgreSQL refuses to run as "
			    "root, so the sandbox runs as an unprivileged user (-u)", server_user);
		if (pw->pw_uid == 0)
			idem_die(IDEM_EXIT_USAGE, "-u %s: PostgreSQL refuses to run as root", server_user);
	}
	if (pw == NULL)
		idem_die(IDEM_EXIT_ENV, "who am I? getpwuid failed");
	server_pw = *pw;
	server_pw.pw_name = idem_estrdup(pw->pw_name);
	server_pw.pw_dir = idem_estrdup(pw->pw_dir);
}

/* Runs a PostgreSQL program (or one named by its absolute path) as the
 * server user; its output goes to the log. */
static int
run(const char *program, char *const args[])
{
	char path[PATH_MAX], *argv[16];
	pid_t pid;
	int status, i, fd;

	if (program[0] == '/')
		snprintf(path, sizeof(path), "%s", program);
	else
		path_join(path, bindir, program);
	argv[0] = path;
	for (i = 0; args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	argv[i + 1] = NULL;
	fflush(NULL);
	if ((pid = fork()) < 0)
		idem_die(IDEM_EXIT_ENV, "fork:");
	if (pid == 0) {
		if (geteuid() == 0 &&
		    (setgid(server_pw.pw_gid) < 0 || initgroups(server_pw.pw_name, server_pw.pw_gid) < 0 ||
		     setuid(server_pw.pw_uid) < 0)) {
			perror("idem-sandbox: becoming the server user");
			_exit(127);
		}
		fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0) {
			dup2(fd, 0);
			close(fd);
		}
		if (chdir(dir) < 0)
			_exit(127);
		execv(path, argv);
		fprintf(stderr, "idem-sandbox: %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			idem_die(IDEM_EXIT_ENV, "waitpid:");
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void
make_dir(const char *path, mode_t mode, int for_server)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", path);
	if (chmod(path, mode) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", path);
	if (for_server && geteuid() == 0 && chown(path, server_pw.pw_uid, server_pw.pw_gid) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", path);
}

static int
is_sandbox_dir(void)
{
	return access(marker_path, F_OK) == 0;
}

/* The directory must be ours: no symbolic link in its place or in its
 * run and data, owned by us, writable by nobody else. As root this keeps
 * another user's directory from steering chown and rm. */
static void
require_own_dir(void)
{
	const char *paths[3] = { dir, run_dir, data_dir };
	struct stat st;
	int i;

	for (i = 0; i < 3; i++) {
		if (lstat(paths[i], &st) < 0) {
			if (errno == ENOENT && i > 0)
				continue;
			idem_die(IDEM_EXIT_ENV, "%s:", paths[i]);
		}
		if (S_ISLNK(st.st_mode))
			idem_die(IDEM_EXIT_USAGE, "%s is a symbolic link; not using it", paths[i]);
		if (i == 0 && (st.st_uid != geteuid() || (st.st_mode & 022)))
			idem_die(IDEM_EXIT_USAGE, "%s is not a private directory of yours; choose "
			    "another with -D", paths[i]);
	}
}

static int
dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int empty = 1;

	if (d == NULL)
		return errno == ENOENT;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = 0;
	closedir(d);
	return empty;
}

static void
conninfo(char *buf, size_t size, const char *db)
{
	snprintf(buf, size, "host=%s port=" SOCKET_PORT " user=" SUPERUSER " dbname=%s "
	    "connect_timeout=5", run_dir, db);
}

static int
server_running(void)
{
	char ci[PATH_MAX + 128];

	conninfo(ci, sizeof(ci), "postgres");
	return PQping(ci) == PQPING_OK;
}

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int
initdb(char *target)
{
	char *initdb_args[] = { "-D", target, "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions", NULL };

	return run("initdb", initdb_args);
}

/*
 * The cluster new sandboxes are copied from, made by initdb once for these
 * server binaries and kept in the server user's cache: initdb takes about a
 * second, a copy a quarter of that. Its name holds the identity of the
 * postgres binary (device, inode, size, time), so an upgraded server gets a
 * cluster of its own. Returns 0 with its path, or -1 when there is no cache
 * (IDEM_SANDBOX_CACHE empty) or it cannot be made, and initdb makes the
 * sandbox's cluster itself.
 */
static int
cached_cluster(char *out)
{
	const char *cache = getenv("IDEM_SANDBOX_CACHE");
	char base[PATH_MAX], postgres[PATH_MAX], tmp[PATH_MAX + 32];
	char *mkdir_args[] = { "-p", "-m", "700", base, NULL };
	struct stat st;

	if (cache && *cache == '\0')
		return -1;
	if (cache)
		snprintf(base, sizeof(base), "%s", cache);
	else if (snprintf(base, sizeof(base), "%s/.cache/idem", server_pw.pw_dir) >= (int)sizeof(base))
		return -1;
	path_join(postgres, bindir, "postgres");
	if (base[0] != '/' || stat(postgres, &st) < 0)
		return -1;
	if (snprintf(out, PATH_MAX, "%s/cluster-1-%jx-%jx-%jx-%jx", base, (uintmax_t)st.st_dev,
	    (uintmax_t)st.st_ino, (uintmax_t)st.st_size, (uintmax_t)st.st_mtime) >= PATH_MAX)
		return -1;
	if (access(out, F_OK) == 0)
		return 0;
	if (run("/bin/mkdir", mkdir_args) != 0)
		return -1;
	/* made aside and renamed, so that sandboxes started together each
	 * see a whole cluster or none */
	snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", out, (long)getpid());
	if (initdb(tmp) != 0) {
		nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
		return -1;
	}
	if (rename(tmp, out) < 0) {
		int taken = errno == EEXIST || errno == ENOTEMPTY;

		nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
		/* another sandbox's start made it first */
		if (!taken)
			return -1;
	}
	return 0;
}

static void
initialize(void)
{
	char conf[PATH_MAX], source[PATH_MAX + 2];
	char *copy_args[] = { "-a", source, data_dir, NULL };
	FILE *f;

	if (cached_cluster(source) == 0) {
		strcat(source, "/.");
		if (run("/bin/cp", copy_args) != 0) {
			idem_warn("copying the cached cluster %s failed; see %s", source, log_path);
			exit(IDEM_EXIT_ENV);
		}
	} else if (initdb(data_dir) != 0) {
		idem_warn("initdb failed; its output is in %s", log_path);
		exit(IDEM_EXIT_ENV);
	}
	path_join(conf, data_dir, "postgresql.conf");
	if ((f = fopen(conf, "a")) == NULL)
		idem_die(IDEM_EXIT_ENV, "%s:", conf);
	fprintf(f, "\n# idem-sandbox: Unix socket only, in a private directory\n"
	    "listen_addresses = ''\n"
	    "unix_socket_directories = '%s'\n"
	    "unix_socket_permissions = 0700\n"
	    "port = " SOCKET_PORT "\n"
	    "track_commit_timestamp = on\n"
	    "synchronous_commit = off\n"
	    "autovacuum_naptime = 1s\n"
	    "log_line_prefix = '%%m [%%p] %%q%%u@%%d '\n", run_dir);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", conf);
}

static void
install_schema(void)
{
	char ci[PATH_MAX + 128];
	struct idem_error err;
	PGconn *conn;
	PGresult *res;

	conninfo(ci, sizeof(ci), "postgres");
	if ((conn = idem_pg_connect(ci, &err)) == NULL)
		idem_die_error(&err);
	res = idem_pg_exec(conn, "looking for the sandbox database", &err,
	    "SELECT 1 FROM pg_database WHERE datname = '" DATABASE "'", 0, NULL);
	if (res == NULL)
		idem_die_error(&err);
	if (PQntuples(res) == 0) {
		PQclear(res);
		res = idem_pg_exec(conn, "creating the sandbox database", &err,
		    "CREATE DATABASE " DATABASE, 0, NULL);
		if (res == NULL)
			idem_die_error(&err);
	}
	PQclear(res);
	PQfinish(conn);

	conninfo(ci, sizeof(ci), DATABASE);
	if ((conn = idem_pg_connect(ci, &err)) == NULL)
		idem_die_error(&err);
	res = idem_pg_exec(conn, "looking for the queue schema", &err,
	    "SELECT to_regclass('idem.sandbox') IS NOT NULL", 0, NULL);
	if (res == NULL)
		idem_die_error(&err);
	if (strcmp(PQgetvalue(res, 0, 0), "f") == 0) {
		PQclear(res);
		res = PQexec(conn, idem_sql_queue);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			char msg[768];

			idem_die(IDEM_EXIT_ENV, "installing the queue schema: %s",
			    idem_pg_message(conn, res, msg, sizeof(msg)));
		}
	}
	PQclear(res);
	PQfinish(conn);
}

static void
print_quoted(const char *name, const char *value)
{
	const char *p;

	printf("%s='", name);
	for (p = value; *p; p++) {
		if (*p == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*p);
	}
	printf("'; export %s;\n", name);
}

static void
print_env(void)
{
	char *url = idem_pg_url(run_dir, SOCKET_PORT, DATABASE, SUPERUSER);

	print_quoted("PGHOST", run_dir);
	print_quoted("PGPORT", SOCKET_PORT);
	print_quoted("PGDATABASE", DATABASE);
	print_quoted("PGUSER", SUPERUSER);
	print_quoted("DATABASE_URL", url);
	print_quoted("IDEM_DATABASE_URL", url);
	print_quoted("IDEM_SANDBOX", dir);
	free(url);
}

static void
start(void)
{
	char *start_args[] = { "start", "-w", "-t", "60", "-s", "-D", data_dir, "-l", log_path, NULL };
	int fd;

	if (mkdir(dir, 0700) < 0) {
		if (errno != EEXIST)
			idem_die(IDEM_EXIT_ENV, "%s:", dir);
		if (!is_sandbox_dir() && !dir_is_empty(dir))
			idem_die(IDEM_EXIT_USAGE, "%s exists and is not an idem sandbox; choose "
			    "another directory with -D", dir);
	}
	require_own_dir();
	/* as root, the server user must be able to pass through */
	make_dir(dir, geteuid() == 0 ? 0711 : 0700, 0);
	if ((fd = open(marker_path, O_WRONLY | O_CREAT, 0644)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", marker_path);
	close(fd);
	make_dir(run_dir, 0700, 1);
	if (geteuid() == 0) {
		fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0600);
		if (fd < 0 || fchown(fd, server_pw.pw_uid, server_pw.pw_gid) < 0)
			idem_die(IDEM_EXIT_ENV, "%s:", log_path);
		close(fd);
	}
	if (!server_running()) {
		char pg_version[PATH_MAX];

		path_join(pg_version, data_dir, "PG_VERSION");
		if (access(pg_version, F_OK) != 0) {
			if (!dir_is_empty(data_dir))
				idem_die(IDEM_EXIT_ENV, "%s holds a half-made cluster; run "
				    "idem-sandbox --purge stop and start again", data_dir);
			make_dir(data_dir, 0700, 1);
			initialize();
		}
		if (run("pg_ctl", start_args) != 0) {
			idem_warn("the server did not start; its log is %s", log_path);
			exit(IDEM_EXIT_ENV);
		}
	}
	install_schema();
	print_env();
}

static void
stop(int purge)
{
	char *stop_args[] = { "stop", "-w", "-t", "30", "-s", "-m", "fast", "-D", data_dir, NULL };
	char *kill_args[] = { "stop", "-w", "-t", "30", "-s", "-m", "immediate", "-D", data_dir, NULL };
	char pid_path[PATH_MAX];
	int tries;

	if (access(dir, F_OK) != 0) {
		if (purge)
			return;
		idem_die(IDEM_EXIT_USAGE, "%s: no sandbox here", dir);
	}
	if (!is_sandbox_dir())
		idem_die(IDEM_EXIT_USAGE, "%s is not an idem sandbox; not touching it", dir);
	require_own_dir();
	path_join(pid_path, data_dir, "postmaster.pid");
	/* a server still starting, or shutting down on a signal of its own,
	 * may write files while they are removed: stop and remove until
	 * nothing is left, for a few seconds */
	for (tries = 0; ; tries++) {
		if (access(pid_path, F_OK) == 0 && run("pg_ctl", stop_args) != 0 &&
		    run("pg_ctl", kill_args) != 0 && access(pid_path, F_OK) == 0) {
			idem_warn("the server did not stop; see %s", log_path);
			exit(IDEM_EXIT_ENV);
		}
		if (!purge || (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 &&
		    access(dir, F_OK) != 0))
			return;
		if (tries == 50)
			idem_die(IDEM_EXIT_ENV, "removing %s:", dir);
		usleep(100000);
	}
}

static int
status(void)
{
	if (access(marker_path, F_OK) != 0) {
		printf("%s: no sandbox\n", dir);
		return IDEM_EXIT_FINDING;
	}
	if (!server_running()) {
		printf("%s: stopped\n", dir);
		return IDEM_EXIT_FINDING;
	}
	printf("%s: running, socket in %s\n", dir, run_dir);
	return 0;
}

/* What the options ask for. */
struct options {
	const char *dir, *user, *command;
	int purge;
};

static void
parse_options(int argc, char *argv[], struct options *opt)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "purge", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(opt, 0, sizeof(*opt));
	opt->dir = getenv("IDEM_SANDBOX");
	while ((c = getopt_long(argc, argv, "+D:u:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'D': opt->dir = optarg; break;
		case 'u': opt->user = optarg; break;
		case 'P': opt->purge = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("idem-sandbox " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind + 1 != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	opt->command = argv[optind];
}

/* -D, else IDEM_SANDBOX, else a directory of this user's in /tmp. */
static void
use_dir(const char *d)
{
	char default_dir[64];

	if (d == NULL || *d == '\0') {
		snprintf(default_dir, sizeof(default_dir), "/tmp/idem-sandbox-%lu",
		    (unsigned long)geteuid());
		d = default_dir;
	}
	set_paths(d);
}

/* As root, without -u, the sandbox stops as whoever owns its data. */
static const char *
stopping_user(const char *user)
{
	struct passwd *owner;
	struct stat st;

	if (user == NULL && geteuid() == 0 && stat(data_dir, &st) == 0 && st.st_uid != 0 &&
	    (owner = getpwuid(st.st_uid)) != NULL)
		return owner->pw_name;
	return user;
}

int
main(int argc, char *argv[])
{
	struct options opt;
	int rc = 0;

	argv0 = "idem-sandbox";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &opt);
	use_dir(opt.dir);
	if (opt.purge && strcmp(opt.command, "stop") != 0)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (strcmp(opt.command, "start") == 0) {
		set_server_user(opt.user);
		find_bindir();
		start();
	} else if (strcmp(opt.command, "stop") == 0) {
		set_server_user(stopping_user(opt.user));
		find_bindir();
		stop(opt.purge);
	} else if (strcmp(opt.command, "env") == 0) {
		if (!is_sandbox_dir())
			idem_die(IDEM_EXIT_USAGE, "%s: no sandbox here; run idem-sandbox start", dir);
		print_env();
	} else if (strcmp(opt.command, "status") == 0) {
		rc = status();
	} else {
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	}
	idem_close_stdout();
	return rc;
}
