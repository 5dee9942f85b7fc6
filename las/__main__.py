from las.cli import main

main()
