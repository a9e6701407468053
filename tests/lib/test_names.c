/* SPDX-License-Identifier: MIT */
/* test_names.c - the one parser of kind names, path names, setting enums. */
#include "util.h"
#include "base.h"

Test(names, kind_words)
{
	static const struct {
		const char *word;
		enum phx_device_kind kind;
	} words[] = {
		{ "cuda", PHX_DEVICE_CUDA }, { "gpu", PHX_DEVICE_CUDA },
		{ "sim", PHX_DEVICE_SIM },   { "kmod", PHX_DEVICE_KMOD },
		{ "phx", PHX_DEVICE_KMOD },  { "auto", PHX_DEVICE_NONE },
		{ NULL, PHX_DEVICE_NONE },
	};
	enum phx_device_kind k;
	unsigned int i;

	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		k = PHX_DEVICE_SIM;
		cr_assert_eq(phx_kind_parse(words[i].word, &k), 0, "%s",
			     words[i].word);
		cr_assert_eq(k, words[i].kind, "%s", words[i].word);
	}
	cr_assert_eq(phx_kind_parse("tpu", &k), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "'tpu'"), "%s",
		  phx_strerror_last());
	cr_assert_eq(phx_kind_parse("sim0", &k), -EINVAL);
	/* and back: a kind's name, its devices' prefix */
	cr_assert_str_eq(phx_kind_name(PHX_DEVICE_KMOD), "kmod");
	cr_assert_str_eq(phx_kind_name((enum phx_device_kind)9), "none");
	cr_assert_str_eq(phx_kind_prefix(PHX_DEVICE_CUDA), "gpu");
	cr_assert_str_eq(phx_kind_prefix(PHX_DEVICE_KMOD), "phx");
	cr_assert_eq(phx_kind_word("gpu0", 3), PHX_DEVICE_CUDA);
}

Test(names, device_names_use_the_same_words)
{
	static const char *const bad[] = { "sim",  "sim:", "simx0", "sim0x",
					   "tpu0", ":0",   "sim:-1" };
	struct phx_device *dev, *again;
	unsigned int i;

	cr_assert_eq(phx_device_open("sim0", &dev), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_device_open("sim:0", &again), 0);
	cr_assert_eq(again, dev, "the same device by either name");
	phx_device_close(again);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(phx_device_open(bad[i], &again), -EINVAL, "%s",
			     bad[i]);
		cr_assert(strstr(phx_strerror_last(), "bad device name"));
	}
	phx_device_close(dev);
}

Test(names, every_path_has_its_own_name)
{
	unsigned int p, q;

	for (p = 0; p < PHX_PATH_COUNT; p++) {
		cr_assert_str_not_empty(phx_path_name((enum phx_path)p));
		for (q = 0; q < p; q++)
			cr_assert_str_neq(phx_path_name((enum phx_path)p),
					  phx_path_name((enum phx_path)q));
	}
	cr_assert_str_eq(phx_path_name(PHX_PATH_PASSTHROUGH), "passthrough");
	cr_assert_str_eq(phx_path_name(PHX_PATH_COUNT), "none");
}

Test(names, settings_name_their_enums, .init = cr_redirect_stderr)
{
	struct phx_settings s;

	setenv("PHX_STREAM_WAIT", "device", 1);
	setenv("PHX_DIRECT", "sometimes", 1);
	setenv("PHX_GATHER", "off", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.stream_wait, PHX_STREAM_WAIT_DEVICE);
	cr_assert_eq(s.direct, PHX_DIRECT_AUTO, "a bad value is ignored");
	cr_assert_eq(s.gather, 0);
}

Test(names, settings_default_to_auto)
{
	struct phx_settings s;

	unsetenv("PHX_STREAM_WAIT");
	unsetenv("PHX_DIRECT");
	unsetenv("PHX_GATHER");
	unsetenv("PHX_HOT_READERS");
	phx_settings_get(&s);
	cr_assert_eq(s.stream_wait, PHX_STREAM_WAIT_AUTO);
	cr_assert_eq(s.direct, PHX_DIRECT_AUTO);
	cr_assert_eq(s.gather, -1);
	cr_assert_eq(s.hot_readers, 16);
}

Test(names, hot_readers_take_a_count)
{
	struct phx_settings s;

	setenv("PHX_HOT_READERS", "3", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.hot_readers, 3);
}
