"""The benchmarks behind `bench/run`: the gateway under test and its peers (`gateway`,
`peers`), starting and stopping processes (`services`), one module per question
(`questions/`), the interleaved rounds (`hop`), the scenarios, and the tables and chart made
from the results. Standard library only."""
