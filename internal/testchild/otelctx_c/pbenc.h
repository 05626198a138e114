/*
 * A minimal protobuf encoder, just enough for an OTEP 4719 ProcessContext:
 * shared by the test publishers of this directory (publisher.c, nodeforge.c).
 */
#ifndef PERFPROF_PBENC_H
#define PERFPROF_PBENC_H

#include <stdint.h>
#include <string.h>

struct buf {
	uint8_t b[4096];
	size_t n;
};

static void put_varint(struct buf *b, uint64_t v)
{
	while (v >= 0x80) {
		b->b[b->n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	b->b[b->n++] = (uint8_t)v;
}

static void put_bytes(struct buf *b, int field, const void *p, size_t n)
{
	put_varint(b, (uint64_t)field << 3 | 2);
	put_varint(b, n);
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

static void put_msg(struct buf *b, int field, const struct buf *m)
{
	put_bytes(b, field, m->b, m->n);
}

/* KeyValue{key = 1, value = 2 AnyValue{string_value = 1}} */
static void put_kv_string(struct buf *b, int field, const char *k, const char *v)
{
	struct buf any = {.n = 0}, kv = {.n = 0};
	put_bytes(&any, 1, v, strlen(v));
	put_bytes(&kv, 1, k, strlen(k));
	put_msg(&kv, 2, &any);
	put_msg(b, field, &kv);
}

/* KeyValue{key, AnyValue{int_value = 3}} */
static void put_kv_int(struct buf *b, int field, const char *k, int64_t v)
{
	struct buf any = {.n = 0}, kv = {.n = 0};
	put_varint(&any, 3 << 3 | 0);
	put_varint(&any, (uint64_t)v);
	put_bytes(&kv, 1, k, strlen(k));
	put_msg(&kv, 2, &any);
	put_msg(b, field, &kv);
}

/* KeyValue{key, AnyValue{array_value = 5 ArrayValue{values = 1 AnyValue{string_value}}}} */
static void put_kv_strings(struct buf *b, int field, const char *k, const char **vs, int n)
{
	struct buf arr = {.n = 0}, any = {.n = 0}, kv = {.n = 0};
	for (int i = 0; i < n; i++) {
		struct buf s = {.n = 0};
		put_bytes(&s, 1, vs[i], strlen(vs[i]));
		put_msg(&arr, 1, &s);
	}
	put_msg(&any, 5, &arr);
	put_bytes(&kv, 1, k, strlen(k));
	put_msg(&kv, 2, &any);
	put_msg(b, field, &kv);
}

#endif
