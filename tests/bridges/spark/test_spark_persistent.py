"""The Spark stomp sink sends persistent:true unless its persistent option says false."""

from __future__ import annotations


def test_the_spark_stomp_sink_sends_persistent_unless_told_not_to() -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

    from bridges.spark._options import StompOptions
    from bridges.spark._sink import StompStreamWriter

    schema = StructType(
        [
            StructField("body", BinaryType()),
            StructField("headers", MapType(StringType(), StringType())),
        ]
    )
    row = Row(body=b"x", headers={"a": "1"})
    sink = StompOptions.from_options({"url": "stomp://h", "destination": "/q"}, role="sink")
    assert sink.persistent
    _, _, headers = StompStreamWriter(sink, schema)._frame(0, row, "p:")
    assert headers["persistent"] == "true"
    off = StompOptions.from_options(
        {"url": "stomp://h", "destination": "/q", "persistent": "false"}, role="sink"
    )
    _, _, headers = StompStreamWriter(off, schema)._frame(0, row, "p:")
    assert "persistent" not in headers
