/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/api/api-connlimit.c: client address keys, and the
 * connection slots of a listener: caps per address and in all, idle
 * connections shed (the longest idle first) to make room, busy and upgraded
 * ones never. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include <cmocka.h>

#include "api-connlimit.h"
#include "util.h"

/* What the shed callback was asked to close. */
struct shed_log {
	size_t n;
	int fds[16];
};

static void shed_record(void *ctx, int fd)
{
	struct shed_log *log = ctx;
	assert_true(log->n < ARRAY_SIZE(log->fds));
	log->fds[log->n++] = fd;
}

static void key_of(const char *text, bool prefix64, char out[CONN_SOURCE_MAX + 1])
{
	struct sockaddr_storage ss = {0};
	socklen_t len;
	if (strchr(text, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &s6->sin6_addr), 1);
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &s4->sin_addr), 1);
		len = sizeof(*s4);
	}
	conn_source_key((const struct sockaddr *)&ss, len, prefix64, out);
}

static void test_source_keys(void **state)
{
	(void)state;
	char k[CONN_SOURCE_MAX + 1];
	key_of("192.0.2.7", false, k);
	assert_string_equal(k, "192.0.2.7");
	key_of("192.0.2.7", true, k);
	assert_string_equal(k, "192.0.2.7");
	/* An IPv4 client on a dual-stack listener is the same client. */
	key_of("::ffff:192.0.2.7", true, k);
	assert_string_equal(k, "192.0.2.7");
	key_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd", false, k);
	assert_string_equal(k, "2001:db8:1:2:aaaa:bbbb:cccc:dddd");
	/* One IPv6 host may use every address of its /64. */
	key_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd", true, k);
	assert_string_equal(k, "2001:db8:1:2::/64");
	key_of("2001:db8:1:2::1", true, k);
	assert_string_equal(k, "2001:db8:1:2::/64");
	key_of("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false, k);
	assert_string_equal(k, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");

	struct sockaddr_un un = {.sun_family = AF_UNIX};
	conn_source_key((const struct sockaddr *)&un, sizeof(sa_family_t), false, k);
	assert_string_equal(k, "unix");
	/* Short or unknown: "?", never a read past the end. */
	struct sockaddr_in s4 = {.sin_family = AF_INET};
	conn_source_key((const struct sockaddr *)&s4, sizeof(s4) - 1, false, k);
	assert_string_equal(k, "?");
	conn_source_key(NULL, 0, false, k);
	assert_string_equal(k, "?");
	struct sockaddr other = {.sa_family = AF_PACKET};
	conn_source_key(&other, sizeof(other), false, k);
	assert_string_equal(k, "?");
}

static void test_per_source_cap_sheds_the_longest_idle(void **state)
{
	(void)state;
	struct conn_table *t = conn_table_new(100, 3);
	struct shed_log log = {0};
	struct conn_slot *s[4];
	for (int i = 0; i < 3; i++) {
		assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_ADMIT);
		s[i] = conn_table_add(t, "a", 10 + i, 1000 + (uint64_t)i);
	}
	assert_int_equal(log.n, 0);
	assert_int_equal(conn_table_count(t, "a"), 3);
	/* Fd 11 finished a request later than 10 and 12 arrived: 10 waited longest. */
	conn_table_busy(t, s[1]);
	conn_table_idle(t, s[1], 5000);
	assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.fds[0], 10);
	/* The shed one no longer counts, even before it is gone. */
	assert_int_equal(conn_table_count(t, "a"), 2);
	s[3] = conn_table_add(t, "a", 13, 6000);
	assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.fds[1], 12);
	/* Another address is not touched by a's cap. */
	assert_int_equal(conn_table_admit(t, "b", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 2);
	for (int i = 0; i < 4; i++)
		conn_table_remove(t, s[i]);
	assert_int_equal(conn_table_count(t, NULL), 0);
	conn_table_free(t);
}

static void test_busy_and_upgraded_are_never_shed(void **state)
{
	(void)state;
	struct conn_table *t = conn_table_new(100, 2);
	struct shed_log log = {0};
	struct conn_slot *x = conn_table_add(t, "a", 10, 1000);
	struct conn_slot *y = conn_table_add(t, "a", 11, 1000);
	conn_table_busy(t, x);
	conn_table_busy(t, y);
	assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_REFUSE_SOURCE);
	assert_int_equal(log.n, 0);
	/* An upgraded connection stays busy when its request completes. */
	conn_table_pin(t, y);
	conn_table_idle(t, y, 2000);
	assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_REFUSE_SOURCE);
	conn_table_idle(t, x, 2000);
	assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.fds[0], 10);
	conn_table_remove(t, x);
	conn_table_remove(t, y);
	conn_table_remove(t, NULL);
	conn_table_busy(t, NULL);
	conn_table_idle(t, NULL, 0);
	conn_table_pin(t, NULL);
	conn_table_free(t);
}

static void test_total_cap(void **state)
{
	(void)state;
	struct conn_table *t = conn_table_new(4, 0);
	struct shed_log log = {0};
	struct conn_slot *s[6];
	/* No per-source cap (the unix socket): one source may take every slot. */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(conn_table_admit(t, "unix", shed_record, &log), CONN_ADMIT);
		s[i] = conn_table_add(t, "unix", 20 + i, 100 + (uint64_t)i);
		conn_table_busy(t, s[i]);
	}
	assert_int_equal(conn_table_admit(t, "unix", shed_record, &log), CONN_REFUSE_TOTAL);
	conn_table_idle(t, s[2], 500);
	conn_table_idle(t, s[0], 600);
	/* Full: the longest idle of any source makes room. */
	assert_int_equal(conn_table_admit(t, "other", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.fds[0], 22);
	s[4] = conn_table_add(t, "other", 24, 700);
	assert_int_equal(conn_table_admit(t, "unix", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.fds[1], 20);
	s[5] = conn_table_add(t, "unix", 25, 800);
	conn_table_busy(t, s[4]);
	conn_table_busy(t, s[5]);
	assert_int_equal(conn_table_admit(t, "unix", shed_record, &log), CONN_REFUSE_TOTAL);
	/* Gone for real: room without shedding. */
	conn_table_remove(t, s[0]);
	conn_table_remove(t, s[2]);
	conn_table_remove(t, s[1]);
	assert_int_equal(conn_table_admit(t, "unix", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 2);
	conn_table_free(t); /* frees what is left */
}

static void test_both_caps_at_once(void **state)
{
	(void)state;
	/* a is at its cap and the listener is full: one of a goes for a's cap,
	 * which also makes the room the listener needs. */
	struct conn_table *t = conn_table_new(3, 2);
	struct shed_log log = {0};
	conn_table_add(t, "a", 1, 10);
	conn_table_add(t, "a", 2, 20);
	struct conn_slot *b = conn_table_add(t, "b", 3, 5);
	assert_int_equal(conn_table_admit(t, "a", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.fds[0], 1);
	/* c is under its cap, the listener full: b, the longest idle of all. */
	conn_table_add(t, "a", 4, 30);
	assert_int_equal(conn_table_admit(t, "c", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 2);
	assert_int_equal(log.fds[1], 3);
	conn_table_remove(t, b);
	conn_table_free(t);
}

/* The idle connections of one attacker, 1100 of them, with a cap of 64:
 * the newest 64 remain, and a newcomer from the same address gets in. */
static void test_a_flood_of_idle_connections(void **state)
{
	(void)state;
	struct conn_table *t = conn_table_new(1024, 64);
	struct shed_log log;
	struct conn_slot **slots = xcalloc(1100, sizeof(*slots));
	size_t shed = 0;
	for (int i = 0; i < 1100; i++) {
		log.n = 0;
		assert_int_equal(conn_table_admit(t, "127.0.0.1", shed_record, &log), CONN_ADMIT);
		shed += log.n;
		for (size_t j = 0; j < log.n; j++) {
			assert_int_equal(log.fds[j], 1000 + (int)shed - 1);
			conn_table_remove(t, slots[log.fds[j] - 1000]);
			slots[log.fds[j] - 1000] = NULL;
		}
		slots[i] = conn_table_add(t, "127.0.0.1", 1000 + i, (uint64_t)i);
	}
	assert_int_equal(shed, 1100 - 64);
	assert_int_equal(conn_table_count(t, NULL), 64);
	log.n = 0;
	assert_int_equal(conn_table_admit(t, "127.0.0.1", shed_record, &log), CONN_ADMIT);
	assert_int_equal(log.n, 1);
	free(slots);
	conn_table_free(t);
}

struct hammer {
	struct conn_table *t;
	int id;
};

static void shed_none(void *ctx, int fd)
{
	(void)ctx;
	(void)fd;
}

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	for (int i = 0; i < 2000; i++) {
		struct conn_slot *s = conn_table_add(h->t, "a", h->id, (uint64_t)i);
		conn_table_admit(h->t, "a", shed_none, NULL);
		conn_table_busy(h->t, s);
		conn_table_idle(h->t, s, (uint64_t)i + 1);
		conn_table_remove(h->t, s);
	}
	return NULL;
}

static void test_thread_safe(void **state)
{
	(void)state;
	struct conn_table *t = conn_table_new(8, 4);
	struct hammer h[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.t = t, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(conn_table_count(t, NULL), 0);
	conn_table_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_source_keys),
	    cmocka_unit_test(test_per_source_cap_sheds_the_longest_idle),
	    cmocka_unit_test(test_busy_and_upgraded_are_never_shed),
	    cmocka_unit_test(test_total_cap),
	    cmocka_unit_test(test_both_caps_at_once),
	    cmocka_unit_test(test_a_flood_of_idle_connections),
	    cmocka_unit_test(test_thread_safe),
	};
	return cmocka_run_group_tests_name("api-connlimit", tests, NULL, NULL);
}
