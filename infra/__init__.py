"""Shared infrastructure: settings, the local Kafka broker, Kafka clients and the analytics store.

A library every service may import; it never imports a service.
"""
