"""SGLang's simulated server: the lines it logs for a scenario (``writer.SIMULATION``)."""
