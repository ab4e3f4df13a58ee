"""Evaluation: closed-loop episodes in process and over ROS, and reports read from bags."""
