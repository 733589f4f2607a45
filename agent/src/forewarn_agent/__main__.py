from forewarn_agent.cli import main

main()
