"""A small inventory module used by Duet's benchmark prompts (a fixed input: do not edit)."""

from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    quantity: int = 0
    price_cents: int = 0
    tags: list[str] = field(default_factory=list)


class Inventory:
    def __init__(self):
        self.items = {}

    def addItem(self, item):
        if item.sku in self.items:
            raise ValueError(f"duplicate sku {item.sku}")
        self.items[item.sku] = item

    def removeItem(self, sku):
        if sku not in self.items:
            raise KeyError(sku)
        del self.items[sku]

    def getItem(self, sku):
        return self.items.get(sku)

    def totalValue(self):
        total = 0
        for item in self.items.values():
            total += item.quantity * item.price_cents
        return total

    def lowStock(self, threshold=5):
        result = []
        for item in self.items.values():
            if item.quantity < threshold:
                result.append(item)
        return sorted(result, key=lambda i: i.quantity)

    def findByTag(self, tag):
        return [item for item in self.items.values() if tag in item.tags]

    def restock(self, sku, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        item = self.items[sku]
        item.quantity += amount
        return item.quantity

    def sell(self, sku, amount):
        item = self.items[sku]
        if item.quantity < amount:
            raise ValueError(f"only {item.quantity} left of {item.name}")
        item.quantity -= amount
        return amount * item.price_cents
