from runyard.cli.main import main

main()
