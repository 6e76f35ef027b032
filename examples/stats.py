def mean(values):
    """Arithmetic mean of a non-empty list of numbers."""
    total = 0
    for v in values:
        total += v
    return total / len(values)


def variance(values):
    """Mean squared distance of the values from their mean."""
    m = mean(values)
    

if __name__ == "__main__":
    print(mean([1, 2, 3]), variance([1, 2, 3]))
