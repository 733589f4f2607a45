from forewarn.cli.main import main

main()
