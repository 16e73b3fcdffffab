/* SPDX-License-Identifier: Apache-2.0 */
/* airlockd's config file (`--config FILE`, packaging/airlockd.conf): the same
 * long options as the command line, one a line, turned into argv elements
 * before getopt_long sees them.
 *
 *   # a comment (a line whose first non-blank is #)
 *   socket /run/airlock/airlockd.sock
 *   state-dir = /var/lib/airlock
 *   seccomp-profile "/usr/local/share/airlock/seccomp/qemu-x86_64.json"
 *   print-backend                     # a flag without a value
 *
 * A line is `name`, `name value` or `name = value`: name is the long option
 * without its `--` ([a-z0-9-], at most DAEMON_CONFIG_NAME_MAX bytes), value the
 * rest of the line without the blanks around it, optionally in double quotes
 * (no escapes; a quoted value may not contain `"`). In an unquoted value, a `#`
 * after a blank starts a comment. UTF-8, no control characters. `config`
 * itself is refused (no includes). */
#ifndef AIRLOCK_DAEMON_CONFIG_H
#define AIRLOCK_DAEMON_CONFIG_H

#include <getopt.h>

#include "error.h"

#define DAEMON_CONFIG_FILE_MAX (64 * 1024)
#define DAEMON_CONFIG_OPTIONS_MAX 256
#define DAEMON_CONFIG_NAME_MAX 48
#define DAEMON_CONFIG_VALUE_MAX 1024

/* Finds `--config FILE` or `--config=FILE` in argv (before a `--`; at most
 * once) and returns a new argv: argv[0], then the file's options in order
 * (`--name` `value` as two elements, or `--name` alone), then the rest of
 * argv without the --config pair. The command line comes last, so its flags
 * win (getopt_long keeps the last of a repeated option). Without --config,
 * default_path is read instead; with neither (default_path NULL), the result
 * is a copy of argv. opts: getopt_long's table, or NULL: a file's option must
 * be in it and give a value exactly when it takes one (FILE:LINE says which
 * is not). ret_argv is NULL-terminated and owns every string: free
 * it with daemon_config_argv_free(). err says FILE:LINE and what is wrong. */
int daemon_config_argv(const char *default_path, const struct option *opts, int argc, char *const argv[], int *ret_argc,
                       char ***ret_argv, struct al_error *err);

/* Frees a result of daemon_config_argv(); NULL is fine. */
void daemon_config_argv_free(char **argv);

static inline void daemon_config_argv_freep(char ***p)
{
	daemon_config_argv_free(*p);
}
#define cleanup_config_argv __attribute__((cleanup(daemon_config_argv_freep)))

#endif
