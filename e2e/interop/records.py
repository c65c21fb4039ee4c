"""A standard Kafka client's view of the reservations topic (e2e/interop.sh).

kafka-python, a client written apart from this project, reads the project's records and checks
them against the README's record format ("The record on the topic"), and produces the records a
foreign producer might write (forged signature, none). Commands:

  read BROKER TOPIC KEY_ENV KCAT_FILE  every record of TOPIC, start to end; checks each and that
                                       kcat (librdkafka) read the same (KCAT_FILE, kcat -J lines);
                                       prints one JSON summary line
  forge BROKER TOPIC PARTITIONS        produces one record signed with a wrong key (acks=all)
  delete BROKER TOPIC                  deletes TOPIC (the test's clean-up)

Exits 1 with a reason on the first record that breaks the format.
"""

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

SIGNATURE_HEADER = "seckill-signature"
# The record's fields and their JSON types (protocol::record::Reservation).
FIELDS = {
    "request_id": str,
    "campaign": str,
    "user": str,
    "sku": str,
    "qty": int,
    "price_cents": int,
    "price_version": int,
    "stock_version": int,
    "reserved_at_ms": int,
}
# Optional fields, absent in older records: their JSON types and what they must hold.
OPTIONAL = {
    "buckets": (int, lambda v: 1 <= v <= 64),
    "client_ip": (str, lambda v: ipaddress.ip_address(v) is not None),
    "device": (str, lambda v: 1 <= len(v) <= 128),
    "registered_at": (int, lambda v: v >= 0),
}
ORIGIN = ("client_ip", "device", "registered_at")
READ_DEADLINE_SECS = 60


def fail(why):
    print(f"interop: {why}", file=sys.stderr)
    sys.exit(1)


def partition_for(user, partitions):
    """FNV-1a 64 of the user id, modulo the partition count (protocol::record::partition_for)."""
    h = 0xCBF29CE484222325
    for b in user.encode():
        h ^= b
        h = (h * 0x100000001B3) % (1 << 64)
    return h % partitions


def check(record, key, partitions):
    """The README's format: JSON value, user key, FNV partition, HMAC header."""
    headers = dict(record.headers or [])
    sig = headers.get(SIGNATURE_HEADER)
    if sig is None:
        fail(f"{record.partition}/{record.offset}: no {SIGNATURE_HEADER} header")
    want = hmac.new(key, record.value, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(sig.decode(), want):
        fail(f"{record.partition}/{record.offset}: signature does not match the gateway key")
    value = json.loads(record.value)
    for field, kind in FIELDS.items():
        if not isinstance(value.get(field), kind) or isinstance(value.get(field), bool):
            fail(f"{record.partition}/{record.offset}: field {field} missing or not {kind.__name__}")
    for field, (kind, good) in OPTIONAL.items():
        if field not in value:
            continue
        v = value[field]
        try:
            ok = isinstance(v, kind) and not isinstance(v, bool) and good(v)
        except ValueError:
            ok = False
        if not ok:
            fail(f"{record.partition}/{record.offset}: optional field {field} is {v!r}")
    if value["qty"] < 1 or value["price_cents"] < 0:
        fail(f"{record.partition}/{record.offset}: qty < 1 or price_cents < 0")
    if record.key.decode() != value["user"]:
        fail(f"{record.partition}/{record.offset}: key {record.key!r} is not the user")
    if record.partition != partition_for(value["user"], partitions):
        fail(f"{record.partition}/{record.offset}: user {value['user']} belongs to another partition")
    return value


def read_all(broker, topic, keep):
    """Reads every record of `topic` from the beginning to the end offsets it had when asked,
    calling keep(record, partition count) on each; returns the partition count."""
    consumer = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False, group_id=None)
    partitions = sorted(consumer.partitions_for_topic(topic) or [])
    if not partitions:
        fail(f"topic {topic} not found")
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    deadline = time.monotonic() + READ_DEADLINE_SECS
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        if time.monotonic() > deadline:
            fail(f"could not read to the end offsets {ends} within {READ_DEADLINE_SECS} s")
        for batch in consumer.poll(timeout_ms=500).values():
            for r in batch:
                keep(r, len(partitions))
    consumer.close()
    return len(partitions)


def read(broker, topic, key_env, kcat_file):
    key = os.environ[key_env].encode()
    seen = {}
    with_origin = [0]
    def keep(r, partitions):
        value = check(r, key, partitions)
        seen[(r.partition, r.offset)] = (value["request_id"], r.headers)
        if any(f in value for f in ORIGIN):
            with_origin[0] += 1
    partitions = read_all(broker, topic, keep)

    # kcat's view (-J: one JSON object a record, headers as a flat [name, value, ...] list).
    kcat = {}
    with open(kcat_file, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            m = json.loads(line)
            headers = m.get("headers") or []
            hdr = dict(zip(headers[0::2], headers[1::2]))
            if SIGNATURE_HEADER not in hdr:
                fail(f"kcat: {m['partition']}/{m['offset']} shows no {SIGNATURE_HEADER} header")
            kcat[(m["partition"], m["offset"])] = (json.loads(m["payload"])["request_id"], hdr[SIGNATURE_HEADER])
    if set(kcat) != set(seen):
        fail(f"kcat read {len(kcat)} records, kafka-python {len(seen)}: not the same offsets")
    for place, (rid, headers) in seen.items():
        if kcat[place][0] != rid or kcat[place][1] != dict(headers)[SIGNATURE_HEADER].decode():
            fail(f"{place}: kcat and kafka-python disagree on the record")
    print(json.dumps({"records": len(seen), "partitions": partitions, "with_origin": with_origin[0],
                      "agree_with_kcat": True}))


def events(broker, topic, kcat_file):
    """The order writer's events topic: every event of schema seckill.order-event/1, keyed by its
    order, its idempotency-key header equal to the JSON's; kcat reads the same events. Prints the
    count by type and the distinct idempotency keys."""
    seen, types, keys = {}, {}, set()
    def keep(r, _partitions):
        event = json.loads(r.value)
        header = dict(r.headers).get("idempotency-key", b"").decode()
        if event.get("schema") != "seckill.order-event/1":
            fail(f"{r.partition}/{r.offset}: schema {event.get('schema')!r}")
        if r.key.decode() != str(event["order_id"]) or header != event["idempotency_key"]:
            fail(f"{r.partition}/{r.offset}: key or idempotency header disagree with the event")
        seen[(r.partition, r.offset)] = event["idempotency_key"]
        types[event["type"]] = types.get(event["type"], 0) + 1
        keys.add(header)
    read_all(broker, topic, keep)
    kcat = {}
    with open(kcat_file, encoding="utf-8") as f:
        for line in f:
            if line.strip().startswith("{"):
                m = json.loads(line)
                kcat[(m["partition"], m["offset"])] = json.loads(m["payload"])["idempotency_key"]
    if kcat != seen:
        fail(f"kcat read {len(kcat)} events, kafka-python {len(seen)}: not the same")
    print(json.dumps({"events": len(seen), "types": types, "idempotency_keys": len(keys), "agree_with_kcat": True}))


def forge(broker, topic, partitions):
    user = "forger"
    value = json.dumps({
        "request_id": "forged-" + base64.b16encode(os.urandom(8)).decode().lower(),
        "campaign": topic.split(".", 1)[-1], "user": user, "sku": "SKU-FORGED", "qty": 1,
        "price_cents": 1, "price_version": 1, "stock_version": 1,
        "reserved_at_ms": int(time.time() * 1000),
    }).encode()
    forged = hmac.new(b"not-the-gateway-key-0123456789", value, hashlib.sha256).hexdigest()
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    producer.send(topic, value=value, key=user.encode(), partition=partition_for(user, int(partitions)),
                  headers=[(SIGNATURE_HEADER, forged.encode())]).get(timeout=30)
    producer.close()
    print(json.loads(value)["request_id"])


def delete(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.delete_topics([topic])
    admin.close()


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"read": read, "events": events, "forge": forge, "delete": delete}[cmd](*args)
