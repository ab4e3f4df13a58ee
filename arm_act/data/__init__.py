"""Datasets: demonstration bags decoded into training arrays, grounding layouts, and collection."""
