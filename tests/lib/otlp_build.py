"""Building OTLP Profiles requests by hand (opentelemetry-proto, from
build/pydeps), as tests/hostile/hostile.py and bench/otlp_ingest_load.py
do: the dictionary's fixed start and a CPU profile's header. The caller
passes the profiles_pb2 module it imported.

    d, s = dictionary(pb)                 # s("main"): a string's index
    prof = cpu_profile(pb, s, 10_000_000, time.time_ns())
"""


def dictionary(pb):
    """A ProfilesDictionary holding every table's zero entry and, at
    attribute index 1, profile.frame.type = native; and s(text), the index
    of text in its string table (added when new)."""
    d = pb.ProfilesDictionary()
    strings = {}

    def s(text):
        if text not in strings:
            strings[text] = len(d.string_table)
            d.string_table.append(text)
        return strings[text]

    s("")
    for table in (d.mapping_table, d.location_table, d.function_table, d.link_table,
                  d.attribute_table, d.stack_table):
        table.add()
    native = d.attribute_table.add(key_strindex=s("profile.frame.type"))
    native.value.string_value = "native"
    return d, s


def cpu_profile(pb, s, period_ns, time_ns, duration_ns=5_000_000_000):
    """A Profile of CPU samples (samples/count, one every period_ns of
    cpu/nanoseconds) that starts at time_ns; no samples yet."""
    prof = pb.Profile()
    prof.sample_type.type_strindex = s("samples")
    prof.sample_type.unit_strindex = s("count")
    prof.period_type.type_strindex = s("cpu")
    prof.period_type.unit_strindex = s("nanoseconds")
    prof.period = period_ns
    prof.time_unix_nano = time_ns
    prof.duration_nano = duration_ns
    return prof
