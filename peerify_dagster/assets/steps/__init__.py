"""What several stage modules share that is neither pure logic (domain/) nor a resource: the LLM steps' gateway and
progress, landing a venue's forums, the rows of a parsed manuscript. Stage modules import these, never each other."""
