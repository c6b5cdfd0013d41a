#include <sys/types.h>

#include <err.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/config.h"
#include "lib/util.h"
#include "fleet.h"

static const struct cli_cmd cmds[] = {
	{ "start", cmd_start, "start [--foreground] [--allow-non-loopback-bind] "
	    "[--port N] [--timeout S]" },
	{ "status", cmd_status, "status [--json]" },
	{ "drain", cmd_drain, "drain [--wait] [--timeout S]" },
	{ "undrain", cmd_undrain, "undrain" },
	{ "stop", cmd_stop, "stop [--timeout S]" },
	{ "reload", cmd_reload, "reload" },
	{ "db", cmd_db, "db migrate | status" },
	{ "turn", cmd_turn, "turn [-q] [-s session] [-a file]... [-k key] "
	    "[--url URL] text" },
};

#define NCMDS	(sizeof(cmds) / sizeof(cmds[0]))

static void
usage(void)
{
	size_t	 i;

	fprintf(stderr, "usage: fleet [-c file] [-d statedir] [-p profile] "
	    "command [args]\ncommands:\n");
	for (i = 0; i < NCMDS; i++)
		fprintf(stderr, "\t%s\n", cmds[i].usage);
	exit(2);
}

void
cmd_usage(const char *name)
{
	size_t	 i;

	for (i = 0; i < NCMDS; i++)
		if (strcmp(cmds[i].name, name) == 0)
			fprintf(stderr, "usage: fleet %s\n", cmds[i].usage);
	exit(2);
}

int
main(int argc, char *argv[])
{
	struct cli	 cli;
	size_t		 i;
	int		 ch;

	memset(&cli, 0, sizeof(cli));
	signal(SIGPIPE, SIG_IGN);
	while ((ch = getopt(argc, argv, "+c:d:hp:")) != -1) {
		switch (ch) {
		case 'c':
			cli.confpath = xstrdup(optarg);
			break;
		case 'd':
			cli.statedir = xstrdup(optarg);
			break;
		case 'p':
			cli.profile = xstrdup(optarg);
			break;
		default:
			usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage();
	if (cli.confpath == NULL)
		cli.confpath = config_default_path();
	if (cli.statedir == NULL && (cli.statedir = state_dir_default()) ==
	    NULL)
		errx(2, "no state directory: set FLEET_HOME or use -d");
	xasprintf(&cli.rundir, "%s/run", cli.statedir);

	for (i = 0; i < NCMDS; i++) {
		if (strcmp(cmds[i].name, argv[0]) == 0) {
			optind = 1;
			return cmds[i].exec(&cli, argc, argv);
		}
	}
	warnx("unknown command '%s'", argv[0]);
	usage();
}
