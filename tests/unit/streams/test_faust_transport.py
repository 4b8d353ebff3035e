"""The worker's Faust consumer fetches with the worker's fetch wait, not Faust's fixed 1.5 s."""

from __future__ import annotations

import aiokafka
import faust

from streams import faust_transport


async def test_the_constructor_stores_the_fetch_wait_where_the_transport_sets_it():
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", fetch_max_wait_ms=123)
    assert vars(consumer)["_fetch_max_wait_ms"] == 123  # what start() hands its Fetcher
    await consumer.stop()


async def test_an_app_given_the_transport_builds_its_kafka_consumer_with_the_short_wait():
    app = faust.App("fetch-wait-test", broker="kafka://127.0.0.1:9", store="memory://")
    app.transport = faust_transport.Transport(app.conf.broker_consumer, app)
    app.topic("events")
    thread = app.consumer._thread
    kafka_consumer = thread._create_worker_consumer(app.transport)
    assert kafka_consumer._fetch_max_wait_ms == faust_transport.FETCH_MAX_WAIT_MS == 50
    await kafka_consumer.stop()
    plain = faust.App("fetch-wait-plain", broker="kafka://127.0.0.1:9", store="memory://")
    faust_default = plain.consumer._thread._create_worker_consumer(plain.transport)
    assert faust_default._fetch_max_wait_ms == 1500  # what the transport is there to change
    await faust_default.stop()
