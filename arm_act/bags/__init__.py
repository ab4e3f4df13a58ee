"""rosbag2 MCAP bags: writing (BagWriter), reading (read_bag, bag_info), repair, in one import.

Bags are the standard rosbag2 layout written by the `rosbags` library: a directory holding
metadata.yaml and one .mcap file with ros2msg schemas, which `ros2 bag`, Foxglove, the `mcap`
library and rosbags' AnyReader read. codec.py holds what writing and reading share,
writer.py the writer, reader.py and mcap_scan.py the reader and repair, episode.py the bag of
one in-process episode, find.py which bags a list of paths names (find_bags).
"""
from arm_act.bags.codec import (
    DEFAULT_QOS,
    INCOMPLETE_KEY,
    INCOMPLETE_REASON_KEY,
    LATCHED_QOS,
    MARKER_NAME,
    BagError,
    decode_cdr,
    encode_cdr,
    make_qos,
    ros_type_name,
    software_version,
    to_rosbags_qos,
    typestore,
)
from arm_act.bags.find import find_bags, is_bag
from arm_act.bags.reader import (
    BagInfo,
    BagMessage,
    TopicInfo,
    bag_info,
    custom_data,
    is_complete,
    read_bag,
    repair,
)
from arm_act.bags.writer import (
    COMPRESSIONS,
    LATCHED_TOPICS,
    SENSOR_TOPIC_TYPES,
    BagWriter,
    TopicSpec,
    live_topic_specs,
    live_topic_types,
)

__all__ = [
    "COMPRESSIONS", "DEFAULT_QOS", "INCOMPLETE_KEY", "INCOMPLETE_REASON_KEY", "LATCHED_QOS", "LATCHED_TOPICS",
    "MARKER_NAME", "SENSOR_TOPIC_TYPES", "BagError", "BagInfo", "BagMessage", "BagWriter", "TopicInfo",
    "TopicSpec", "bag_info", "custom_data", "decode_cdr", "encode_cdr", "find_bags", "is_bag", "is_complete",
    "live_topic_specs", "live_topic_types", "make_qos", "read_bag", "repair", "ros_type_name", "software_version",
    "to_rosbags_qos", "typestore",
]
