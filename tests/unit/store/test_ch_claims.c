/* Unit tests: server/store/clickhouse/claims on SQLite (the same SQL runs
 * on PostgreSQL in tests/integration/test_clickhouse_store.py, where two
 * replicas race one batch): a claim is taken once, refused to a second
 * request while young, taken over once its lease ran out, released only
 * by the token that holds it, and old claims expire; another connection
 * to the same database sees the claims. */
#include "testutil.h"

#include "buf.h"
#include "server/store/clickhouse/claims.h"

static void test_claims(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct buf url = { 0 }, err = { 0 };
	buf_printf(&url, "%s/meta.db", dir);
	struct ch_claims *a = NULL, *b = NULL;
	assert_int_equal(ch_claims_open(url.data, NULL, &a, &err), 0);
	assert_int_equal(ch_claims_open(url.data, NULL, &b, &err), 0); /* a second replica */
	const int64_t t0 = 1800000000000LL;
	int64_t ta = 0, tb = 0, tc = 0;
	bool unavailable = true;
	assert_int_equal(ch_claims_take(a, "p/agent/1", t0, &ta, &unavailable, &err), 1);
	assert_false(unavailable);
	assert_true(ta > 0);
	/* held: the other replica, and a second request of the same one, wait */
	assert_int_equal(ch_claims_take(b, "p/agent/1", t0 + 1000, &tb, &unavailable, &err), 0);
	assert_int_equal(ch_claims_take(a, "p/agent/1", t0 + 2000, &tc, &unavailable, &err), 0);
	/* another batch is free; a hostile id is only bytes */
	assert_int_equal(ch_claims_take(b, "p/agent/2", t0, &tb, &unavailable, &err), 1);
	assert_int_equal(ch_claims_take(b, "p/'; DROP TABLE ch_batch_claims; --/3", t0, &tc,
					&unavailable, &err), 1);
	/* released by its token alone */
	ch_claims_release(b, "p/agent/1", tb);
	assert_int_equal(ch_claims_take(b, "p/agent/1", t0 + 3000, &tb, &unavailable, &err), 0);
	ch_claims_release(a, "p/agent/1", ta);
	assert_int_equal(ch_claims_take(b, "p/agent/1", t0 + 3000, &tb, &unavailable, &err), 1);
	/* a claim whose holder died lapses with its lease: taken over, and the
	 * late release of the old holder leaves the new claim alone */
	assert_int_equal(ch_claims_take(a, "p/agent/1", t0 + 3000 + CH_CLAIM_LEASE_MS, &ta,
					&unavailable, &err), 0);
	assert_int_equal(ch_claims_take(a, "p/agent/1", t0 + 3001 + CH_CLAIM_LEASE_MS, &ta,
					&unavailable, &err), 1);
	ch_claims_release(b, "p/agent/1", tb);
	assert_int_equal(ch_claims_take(b, "p/agent/1", t0 + 4000 + CH_CLAIM_LEASE_MS, &tb,
					&unavailable, &err), 0);
	/* expiry: the claims made before the cut go */
	assert_int_equal(ch_claims_expire(a, t0 + 1), 2);
	assert_int_equal(ch_claims_take(a, "p/agent/2", t0 + 5000, &ta, &unavailable, &err), 1);
	assert_int_equal(ch_claims_expire(a, t0 + 10 * CH_CLAIM_LEASE_MS), 2);
	assert_int_equal(ch_claims_take(a, "p/agent/1", t0 + 6000, &ta, &unavailable, &err), 1);
	ch_claims_close(a);
	ch_claims_close(b);
	/* a database that cannot be opened: refused with a message */
	buf_reset(&url);
	buf_printf(&url, "%s/no/such/dir/meta.db", dir);
	assert_int_equal(ch_claims_open(url.data, NULL, &a, &err), -1);
	assert_null(a);
	assert_true(err.len > 0);
	buf_free(&url);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_claims))
