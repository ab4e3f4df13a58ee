"""The measurements behind `arm-act bench`: inference, rendering, the loop, and the nodes over DDS."""
