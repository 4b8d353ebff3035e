"""The contract between services: Avro schemas, typed records, topic names and the codec."""
