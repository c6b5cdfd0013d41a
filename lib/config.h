/*
 * fleet.ini: a [fleet] section choosing the default profile and one
 * [profile NAME] section per policy.  Every profile in the file is
 * validated, not only the one in use, and every problem is reported as
 * FILE:LINE.  Secrets never appear in the file: keys ending in _env name
 * the environment variable that holds them.
 */
#ifndef FLEET_CONFIG_H
#define FLEET_CONFIG_H

#include <stdint.h>

#include "log.h"

#define CONFIG_HOST_MAX		256
#define CONFIG_ENV_MAX		64
#define CONFIG_USER_MAX		33
#define CONFIG_PATH_MAX		256
#define CONFIG_MODEL_MAX	128
#define CONFIG_NAME_MAX		40	/* inih keeps 49 of a section name */

struct fleet_config {
	char		*path;
	char		 profile[CONFIG_NAME_MAX + 1];

	/* [profile NAME] */
	char		 listen_host[CONFIG_HOST_MAX];
	int		 listen_port;
	int		 workers;
	int		 shutdown_timeout;
	int		 kill_timeout;
	enum log_level	 log_level;
	char		 database_url_env[CONFIG_ENV_MAX];
	char		 db_user[CONFIG_USER_MAX];
	char		 postgres_bindir[CONFIG_PATH_MAX];
	int		 heartbeat_seconds;
	int		 stale_after;
	int64_t		 max_upload_bytes;
	int64_t		 max_artifact_bytes;

	/* sandboxes */
	char		 sandbox_backend[CONFIG_NAME_MAX + 1];
	int		 sandbox_max;
	int		 sandbox_warm;
	int		 sandbox_queue_max;
	int		 lease_ttl;
	int		 sandbox_cpu_seconds;
	int64_t		 sandbox_memory;
	int		 sandbox_processes;
	int64_t		 sandbox_tmp_size;
	int64_t		 sandbox_file_size;
	int		 sandbox_open_files;
	int64_t		 kernel_output_cap;

	/* the language models */
	char		 lm_base_url_env[CONFIG_ENV_MAX];
	char		 lm_api_key_env[CONFIG_ENV_MAX];
	char		 root_model[CONFIG_MODEL_MAX];
	char		 sub_model[CONFIG_MODEL_MAX];
	int		 root_max_tokens;
	int		 sub_max_tokens;
	int		 lm_timeout;
	int		 sub_timeout;
	int		 lm_max_attempts;

	/* the RLM, per Turn */
	int		 max_iters;
	int		 max_llm_calls;
	int		 max_output_chars;
	int64_t		 max_execution_output_bytes;
	int		 execution_timeout;
	int		 turn_timeout;
	int		 turn_queue_max;
	int		 recursion_enabled;
	int		 recursion_max_calls;
	int		 recursion_child_max_iters;
	int		 recursion_child_max_llm_calls;
	int		 recursion_child_max_output_chars;
};

struct fleet_config	*config_load(const char *, const char *, char **);
void			 config_free(struct fleet_config *);
char			*config_default_path(void);
char			*state_dir_default(void);
char			*config_kernel_path(void);
char			*config_db_conninfo(const struct fleet_config *,
			    const char *, int *);

#endif
