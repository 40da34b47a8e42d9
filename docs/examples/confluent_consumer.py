"""Follow keel.events.v1 with confluent-kafka (librdkafka) in a consumer group.

Prints every event once, as one JSON line, each session's events in seq order. The relay
publishes at least once, so a record at or below its session's last seq is a duplicate and is
dropped. Offsets are committed only for records already handled: a restarted consumer resumes
where it stopped and loses nothing.

    python confluent_consumer.py --bootstrap 127.0.0.1:9092 --group my-analytics
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from confluent_kafka import Consumer, KafkaException


def follow(
    bootstrap: str, topic: str, group: str, settings: dict[str, str], max_events: int | None
) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",  # a new group starts at the beginning
            "enable.auto.offset.store": False,  # commit only what was handled (store_offsets)
            **settings,
        }
    )
    last_seq: dict[tuple[str, str], int] = {}
    printed = 0
    consumer.subscribe([topic])
    try:
        while max_events is None or printed < max_events:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            event = json.loads(message.value() or b"null")
            session, seq = (event["tenant"], event["session"]), event["seq"]
            last = last_seq.get(session, 0)
            if seq > last:
                if seq > last + 1:  # the missing events are in the ledger (GET .../events)
                    print(f"gap: {session} {last + 1}..{seq - 1}", file=sys.stderr)
                last_seq[session] = seq
                print(json.dumps(event), flush=True)
                printed += 1
            consumer.store_offsets(message)
    finally:
        consumer.close()  # commits the stored offsets and leaves the group
    return printed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KEEL_KAFKA_BOOTSTRAP"))
    prefix = os.environ.get("KEEL_TOPIC_PREFIX", "")
    parser.add_argument("--topic", default=f"{prefix}keel.events.v1")
    parser.add_argument("--group", required=True)
    parser.add_argument("--max-events", type=int, help="stop after printing this many")
    parser.add_argument("-X", dest="settings", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if not args.bootstrap:
        parser.error("--bootstrap (or KEEL_KAFKA_BOOTSTRAP) is required")
    settings = dict(setting.split("=", 1) for setting in args.settings)
    follow(args.bootstrap, args.topic, args.group, settings, args.max_events)


if __name__ == "__main__":
    main()
