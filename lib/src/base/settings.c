/* SPDX-License-Identifier: MIT */
/*
 * settings.c - the settings a user can change (struct phx_settings): their
 * defaults in one table and their PHX_* environment overrides, read once
 * at first use.  Limits no one tunes are named where they apply: base.h
 * for those of every layer, engine_i.h and stream_i.h for their own.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base.h"

PHX_EXPORT int phx_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno)
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (*end) {
		end++;
		/* accept "4M", "4MB", "4MiB" */
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static struct phx_settings settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

/*
 * A bad PHX_* value is the library's one-line error (what phx_strerror_last()
 * says after the call that first read the settings), and since that call
 * may be any, it goes to stderr too; the default stays in force.
 */
static void env_bad(const char *name, const char *val, const char *why)
{
	phx_err(EINVAL, "ignoring %s=%s: %s", name, val, why);
	fprintf(stderr, "phoenix: %s\n", phx_strerror_last());
}

/*
 * @name's value if it is a number (K/M/G/T suffixes allowed) of at least
 * @min, @bytes of them or a count; reported and ignored otherwise.
 */
static void env_number(const char *name, uint64_t *val, uint64_t min,
		       bool bytes)
{
	const char *s = getenv(name);
	char why[64];
	uint64_t v;

	if (!s || !*s)
		return;
	if (phx_parse_size(s, &v) || v < min) {
		snprintf(why, sizeof(why), "not a %s of at least %llu%s",
			 bytes ? "size" : "count", (unsigned long long)min,
			 bytes ? " bytes" : "");
		env_bad(name, s, why);
		return;
	}
	*val = v;
}

static void env_size(const char *name, uint64_t *val, uint64_t min)
{
	env_number(name, val, min, true);
}

/* A size of at least @min and at most @max; reported and ignored else. */
static void env_size_max(const char *name, uint64_t *val, uint64_t min,
			 uint64_t max)
{
	uint64_t v = *val;
	char why[96];

	env_size(name, &v, min);
	if (v <= max) {
		*val = v;
		return;
	}
	snprintf(why, sizeof(why), "more than the largest, %llu bytes",
		 (unsigned long long)max);
	env_bad(name, getenv(name), why);
}

/* A count of at least @min; more than @max is cut to @max. */
static void env_count(const char *name, unsigned int *val, uint64_t min,
		      uint64_t max)
{
	uint64_t v = *val;

	env_number(name, &v, min, false);
	*val = (unsigned int)phx_min(v, max);
}

/*
 * @name's value as an index into NULL-terminated @choices, "auto" -1
 * (the enums of phoenix.h number their choices that way); *@val stays
 * unless the variable names one of them.
 */
static int env_choice(const char *name, const char *const *choices, int val)
{
	const char *s = getenv(name);
	char list[128] = "use auto";
	int i, n;

	if (!s || !*s)
		return val;
	if (!strcmp(s, "auto"))
		return -1;
	for (i = 0; choices[i]; i++)
		if (!strcmp(s, choices[i]))
			return i;
	for (n = i, i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list),
			 "%s%s", i == n - 1 ? " or " : ", ", choices[i]);
	env_bad(name, s, list);
	return val;
}

static void settings_init(void)
{
	const uint64_t staging_default = 64ULL << 20;
	struct rlimit rl;

	settings = (struct phx_settings){
		.staging_size = staging_default,
		.chunk_size = 4ULL << 20,
		.queue_depth = 16,
		.alloc_chunk = 64ULL << 20,
		.direct = PHX_DIRECT_AUTO,
		.hot_fraction = 50,
		.sim_devices = 1,
		.sim_capacity = 4ULL << 30,
		.stream_wait = PHX_STREAM_WAIT_AUTO,
		.stream_rings = 1,
		.gather = -1,
		.hot_readers = 16,
	};
	env_size("PHX_STAGING_SIZE", &settings.staging_size, PHX_MIN_SLOT);
	env_size_max("PHX_CHUNK_SIZE", &settings.chunk_size, PHX_PAGE,
		     PHX_MAX_CHUNK);
	env_size("PHX_ALLOC_CHUNK", &settings.alloc_chunk, PHX_PAGE);
	env_size("PHX_SIM_CAPACITY", &settings.sim_capacity, 1 << 20);
	env_count("PHX_QUEUE_DEPTH", &settings.queue_depth, 1,
		  PHX_MAX_QUEUE_DEPTH);
	env_count("PHX_STREAM_RINGS", &settings.stream_rings, 1, 4);
	env_count("PHX_SIM_DEVICES", &settings.sim_devices, 1, 64);
	env_count("PHX_HOT_FRACTION", &settings.hot_fraction, 0, 101);
	env_count("PHX_HOT_READERS", &settings.hot_readers, 0, 64);

	settings.chunk_size = phx_align_up(settings.chunk_size, PHX_PAGE);
	if (settings.staging_size / settings.chunk_size >
	    PHX_MAX_STAGING_SLOTS) {
		char why[128];

		snprintf(why, sizeof(why),
			 "more than %u chunks of %llu bytes (PHX_CHUNK_SIZE)",
			 PHX_MAX_STAGING_SLOTS,
			 (unsigned long long)settings.chunk_size);
		env_bad("PHX_STAGING_SIZE",
			getenv("PHX_STAGING_SIZE") ?: "(default)", why);
		settings.staging_size = staging_default;
	}
	if (settings.staging_size < settings.chunk_size)
		settings.staging_size = settings.chunk_size;

	settings.direct = (enum phx_direct)env_choice(
		"PHX_DIRECT",
		(const char *const[]){ [PHX_DIRECT_OFF] = "off",
				       [PHX_DIRECT_ON] = "on",
				       NULL },
		settings.direct);
	settings.stream_wait = (enum phx_stream_wait)env_choice(
		"PHX_STREAM_WAIT",
		(const char *const[]){ [PHX_STREAM_WAIT_HOST] = "host",
				       [PHX_STREAM_WAIT_DEVICE] = "device",
				       [PHX_STREAM_WAIT_KERNEL] = "kernel",
				       [PHX_STREAM_WAIT_COPY] = "copy",
				       NULL },
		settings.stream_wait);
	settings.gather = env_choice("PHX_GATHER",
				     (const char *const[]){ "off", "on", NULL },
				     settings.gather);

	/* Exported buffers travel as one fd per chunk: allow many. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

const struct phx_settings *phx_settings(void)
{
	pthread_once(&settings_once, settings_init);
	return &settings;
}

PHX_EXPORT void phx_settings_get(struct phx_settings *out)
{
	*out = *phx_settings();
}
