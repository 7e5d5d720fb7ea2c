"""Performance: the throughput benchmark (``bench``), projected run times (``projection``),
the device check's gates (``gates``) and the prepared GPU check (``devicecheck``)."""
